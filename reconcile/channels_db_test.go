package reconcile_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

// Recon jobs of channel accounts fetch through the channels' own protocols, here against
// paysim speaking them: WeChat Pay APIv3 (signed requests, signed answers in platform
// certificate and public-key mode, SHA1-checked downloads within the URL's life, encrypted and
// split bills), Alipay (RSA2 both ways, the zip before its URL expires), Stripe (stripe-go) and
// Adyen (API key or report user). Every tampered answer is refused with one line, and nothing is
// imported.

var (
	testKeysOnce sync.Once
	testKeys     [5]*rsa.PrivateKey // merchant, another merchant, paysim platform, paysim alipay, alipay app
)

func rsaKey(i int) *rsa.PrivateKey {
	testKeysOnce.Do(func() {
		var wg sync.WaitGroup
		for i := range testKeys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := rsa.GenerateKey(rand.Reader, 2048)
				if err != nil {
					panic(err)
				}
				testKeys[i] = k
			}()
		}
		wg.Wait()
	})
	return testKeys[i]
}

const (
	keyMerchant = iota
	keyOtherMerchant
	keyPlatform
	keyAlipay
	keyApp
)

const merchantSerial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"

// recentDay is a bill day WeChat Pay still serves (the last three months): two days ago in
// Shanghai, and its date.
func recentDay() (time.Time, string) {
	now := time.Now().In(shanghai)
	d := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, shanghai).AddDate(0, 0, -2)
	return d, d.Format(time.DateOnly)
}

// channelRig is paysim behind a proxy that can tamper with answers, and a bundle whose
// allow-list names the proxy.
type channelRig struct {
	*bundle
	sim    *paysim.Server
	client *paysim.Client
	proxy  *httptest.Server
	tamper atomic.Pointer[func(*http.Request, *http.Response) error]
	keys   paysim.ProtocolKeys
}

func newChannelRig(t *testing.T, pcfg paysim.Config, cfgs ...func(*reconcile.Config)) *channelRig {
	t.Helper()
	pcfg.WechatPlatformKey, pcfg.AlipayKey = rsaKey(keyPlatform), rsaKey(keyAlipay)
	if pcfg.Seed == 0 {
		pcfg.Seed = 3
	}
	sim, err := paysim.NewServer(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	direct := httptest.NewServer(sim)
	t.Cleanup(direct.Close)
	rig := &channelRig{sim: sim, client: paysim.NewClient(direct.URL, nil)}
	target, _ := url.Parse(direct.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if f := rig.tamper.Load(); f != nil {
			return (*f)(resp.Request, resp)
		}
		return nil
	}
	rig.proxy = httptest.NewServer(rp)
	t.Cleanup(rig.proxy.Close)
	if err := sim.AddMerchant(paysim.Merchant{
		WechatSerial: merchantSerial, WechatPublicKey: string(chanproto.EncodePublicKey(&rsaKey(keyMerchant).PublicKey)),
		AlipayAppID: "2021000122600000", AlipayPublicKey: string(chanproto.EncodePublicKey(&rsaKey(keyApp).PublicKey)),
		StripeSecretKey: "sk_test_paysim_0123456789", AdyenAPIKey: "AQE-paysim-key", AdyenReportUser: "report@Company.Paysim",
		AdyenReportPassword: "report-password"}); err != nil {
		t.Fatal(err)
	}
	if rig.keys, err = sim.ProtocolKeys(); err != nil {
		t.Fatal(err)
	}
	rig.bundle = setup(t, append([]func(*reconcile.Config){allow(rig.proxy.URL)}, cfgs...)...)
	return rig
}

// setTamper changes answers on their way back to the fetcher.
func (r *channelRig) setTamper(f func(*http.Request, *http.Response) error) { r.tamper.Store(&f) }

// account configures channel as an account of kind against paysim (through the proxy).
func (r *channelRig) account(channel, kind string, s reconcile.AccountSettings, creds map[string]reconcile.CredentialInput) {
	r.t.Helper()
	if s.APIBase == "" {
		s.APIBase = r.proxy.URL
		switch kind {
		case reconcile.KindAlipay:
			s.APIBase += "/gateway.do"
		case reconcile.KindAdyen:
			s.APIBase += "/reports/download"
		}
	}
	if _, err := r.rec.SetChannelSettings(r.ctx, r.db, channel, kind, s, "operator:root"); err != nil {
		r.t.Fatal(err)
	}
	for name, in := range creds {
		if _, err := r.rec.SetCredential(r.ctx, r.db, channel, name, in, "operator:root"); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *channelRig) wechatAccount(channel string, mod ...func(*reconcile.AccountSettings)) {
	s := reconcile.AccountSettings{MchID: r.keys.WechatMchID}
	for _, k := range r.keys.WechatPlatform {
		s.PlatformKeys = append(s.PlatformKeys, reconcile.PlatformKey{ID: k.ID, PEM: k.PEM})
	}
	for _, f := range mod {
		f(&s)
	}
	r.account(channel, reconcile.KindWechatPay, s, map[string]reconcile.CredentialInput{reconcile.CredMerchantPrivateKey: {
		Value: string(chanproto.EncodePrivateKey(rsaKey(keyMerchant))), Label: merchantSerial}})
}

func (r *channelRig) alipayAccount(channel string) {
	r.account(channel, reconcile.KindAlipay, reconcile.AccountSettings{AppID: "2021000122600000", AlipayPublicKey: r.keys.AlipayPublicKey},
		map[string]reconcile.CredentialInput{reconcile.CredAppPrivateKey: {Value: string(chanproto.EncodePrivateKey(rsaKey(keyApp)))}})
}

// charges puts CNY charges at paysim on the bill day (Shanghai) for orders a, b, c, d.
func (r *channelRig) charges(day time.Time) {
	r.t.Helper()
	for i, amount := range []int64{12800, 50, 123456, 999} {
		at := day.Add(time.Duration(9+i) * time.Hour)
		if _, err := r.client.InsertChannelCharge(context.Background(), paysim.ChannelCharge{AmountMinor: amount, Currency: "CNY",
			MerchantOrderNo: "order-" + string(rune('a'+i)), CreatedAt: &at}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// job creates a job of channel's account (no source: the account's fetcher).
func (r *channelRig) job(name, channel, format, bill string) *reconcile.ReconJob {
	r.t.Helper()
	j, err := r.rec.CreateJob(r.ctx, reconcile.JobSpec{Name: name, Channel: channel, Format: format, Bill: bill,
		Operations: []string{"payment.charge"}, BillDateOffsetDays: 1, CronSpec: "0 11 * * *", TimeZone: "Asia/Shanghai",
		Enabled: true, ReadyDeadlineSeconds: 0, FeeSchedule: &reconcile.FeeSchedule{RateBP: "60", Refunds: "kept"}})
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

// imported counts statements and statement lines.
func (r *channelRig) imported() (statements, lines int64) {
	r.t.Helper()
	r.db.Raw(`SELECT count(*) FROM statements`).Scan(&statements)
	r.db.Raw(`SELECT count(*) FROM statement_lines`).Scan(&lines)
	return
}

// wantImported checks a run loaded the four charges as CHANNEL_ONLY (no local keys), with its
// settlement and fees agreeing.
func (r *channelRig) wantImported(run *reconcile.Run, err error, fetcher string) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", fetcher, err)
	}
	if run.RowsLoaded != 4 || run.Counts["CHANNEL_ONLY"] != 4 || len(run.Counts) != 1 {
		r.t.Errorf("%s: loaded %d, counts %v; want 4 lines, 4 CHANNEL_ONLY", fetcher, run.RowsLoaded, run.Counts)
	}
}

// wantRefused checks a run failed with one line holding want, and imported nothing.
func (r *channelRig) wantRefused(run *reconcile.Run, err error, want string) {
	r.t.Helper()
	if err == nil || run == nil || run.Status != reconcile.RunFailed || run.Error == nil {
		r.t.Fatalf("want a failed run; got %+v, %v", run, err)
	}
	r.t.Logf("refused: %s", *run.Error)
	if !strings.Contains(*run.Error, want) || strings.Contains(*run.Error, "\n") {
		r.t.Errorf("run error %q; want one line containing %q", *run.Error, want)
	}
	if s, l := r.imported(); s != 0 || l != 0 {
		r.t.Errorf("%d statements, %d lines imported from a refused answer", s, l)
	}
}

func TestWechatPay_TradeBillThroughTheSignedProtocol(t *testing.T) {
	for _, mode := range []struct {
		name      string
		publicKey bool
		bill      string
	}{{"platform certificate", false, paysim.WechatBillPlain}, {"WeChat Pay public key", true, paysim.WechatBillPlain},
		{"encrypted, split in bill_sequence parts", false, paysim.WechatBillSplit}} {
		t.Run(mode.name, func(t *testing.T) {
			rig := newChannelRig(t, paysim.Config{WechatPublicKeyMode: mode.publicKey, WechatBillMode: mode.bill, WechatBillParts: 3})
			day, date := recentDay()
			rig.charges(day)
			rig.wechatAccount("wx-1900000109")
			job := rig.job("wechat-daily", "wx-1900000109", "wechat", "")
			if job.Fetcher != reconcile.FetcherWechatPay || job.Bill != "tradebill" {
				t.Errorf("job fetcher %q bill %q", job.Fetcher, job.Bill)
			}
			run, err := rig.rec.RunJob(rig.ctx, job, date, "daemon", nil)
			rig.wantImported(run, err, "wechatpay_v3")
		})
	}
}

// gunzipEdit decompresses a gzip body, edits it and compresses it again.
func gunzipEdit(body []byte, edit func([]byte) []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return body
	}
	plain, _ := io.ReadAll(zr)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(edit(plain))
	zw.Close()
	return buf.Bytes()
}

// replaceBody swaps an answer's body.
func replaceBody(resp *http.Response, edit func([]byte) []byte) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	resp.Body.Close()
	b = edit(b)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

func TestWechatPay_TamperedAnswersAreRefusedAndNothingIsImported(t *testing.T) {
	onPath := func(suffix string, f func(*http.Response) error) func(*http.Request, *http.Response) error {
		return func(req *http.Request, resp *http.Response) error {
			if strings.HasSuffix(req.URL.Path, suffix) {
				return f(resp)
			}
			return nil
		}
	}
	// The fetcher's clock, moved on by the expired-URL case while the bill answer is on its way.
	clock := &stepClock{}
	cases := []struct {
		name    string
		tamper  func(*http.Request, *http.Response) error
		account func(*reconcile.AccountSettings)
		paysim  paysim.Config
		clock   *stepClock
		want    string
	}{
		{name: "bad signature: the bill answer's hash_value changed on the way",
			tamper: onPath("/v3/bill/tradebill", func(resp *http.Response) error {
				return replaceBody(resp, func(b []byte) []byte { return bytes.Replace(b, []byte(`"SHA1"`), []byte(`"sha1"`), 1) })
			}),
			want: "WeChat Pay's answer signature does not verify"},
		{name: "unsigned answer", tamper: onPath("/v3/bill/tradebill", func(resp *http.Response) error {
			resp.Header.Del(chanproto.HeaderWechatSignature)
			return nil
		}), want: "WeChat Pay's answer is not signed"},
		{name: "wrong serial: signed by a platform key the account does not know",
			account: func(s *reconcile.AccountSettings) {
				s.PlatformKeys = []reconcile.PlatformKey{{ID: "PUB_KEY_ID_0000000000000000000000000001",
					PEM: string(chanproto.EncodePublicKey(&rsaKey(keyOtherMerchant).PublicKey))}}
			},
			want: "signed by a key this account does not know"},
		{name: "hash mismatch: the downloaded bill differs from the hash_value",
			tamper: onPath("/v3/billdownload/file", func(resp *http.Response) error {
				return replaceBody(resp, func(b []byte) []byte {
					return gunzipEdit(b, func(p []byte) []byte { return bytes.Replace(p, []byte("order-a"), []byte("order-z"), 1) })
				})
			}),
			want: "SHA1 is not the hash_value"},
		{name: "truncated gzip", tamper: onPath("/v3/billdownload/file", func(resp *http.Response) error {
			return replaceBody(resp, func(b []byte) []byte { return b[:len(b)/2] })
		}), want: "the downloaded bill does not decompress whole"},
		{name: "expired URL at the channel", paysim: paysim.Config{WechatDownloadLife: time.Nanosecond},
			want: "refused the download of part 1: HTTP 400 INVALID_REQUEST"},
		{name: "expired URL here: the bill answer came after the URL's life",
			tamper:  onPath("/v3/bill/tradebill", func(*http.Response) error { clock.advance(1100 * time.Millisecond); return nil }),
			account: func(s *reconcile.AccountSettings) { s.DownloadURLLifeSeconds = 1 },
			clock:   clock,
			want:    "the download_url of part 1 expired before it could be fetched"},
		{name: "an encrypted part altered on the way", paysim: paysim.Config{WechatBillMode: paysim.WechatBillEncrypted},
			tamper: onPath("/v3/billdownload/file", func(resp *http.Response) error {
				return replaceBody(resp, func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
			}),
			want: "SHA1 is not the hash_value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfgs []func(*reconcile.Config)
			if c.clock != nil {
				cfgs = append(cfgs, func(cfg *reconcile.Config) { cfg.Now = c.clock.now })
			}
			rig := newChannelRig(t, c.paysim, cfgs...)
			day, date := recentDay()
			rig.charges(day)
			mods := []func(*reconcile.AccountSettings){}
			if c.account != nil {
				mods = append(mods, c.account)
			}
			rig.wechatAccount("wx-1900000109", mods...)
			if c.tamper != nil {
				rig.setTamper(c.tamper)
			}
			job := rig.job("wechat-daily", "wx-1900000109", "wechat", "")
			run, err := rig.rec.RunJob(rig.ctx, job, date, "daemon", nil)
			rig.wantRefused(run, err, c.want)
		})
	}
}

func TestWechatPay_UnsignedOrBadlySignedRequestsGetTheChannels401(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	day, date := recentDay()
	rig.charges(day)
	rig.account("wx-1900000109", reconcile.KindWechatPay, reconcile.AccountSettings{MchID: rig.keys.WechatMchID,
		PlatformKeys: []reconcile.PlatformKey{{ID: rig.keys.WechatPlatform[0].ID, PEM: rig.keys.WechatPlatform[0].PEM}}},
		map[string]reconcile.CredentialInput{reconcile.CredMerchantPrivateKey: {
			// a key paysim does not know under that serial
			Value: string(chanproto.EncodePrivateKey(rsaKey(keyOtherMerchant))), Label: merchantSerial}})
	job := rig.job("wechat-daily", "wx-1900000109", "wechat", "")
	run, err := rig.rec.RunJob(rig.ctx, job, date, "daemon", nil)
	rig.wantRefused(run, err, "WeChat Pay refused the request's signature (HTTP 401 SIGN_ERROR)")

	resp, err := http.Get(rig.proxy.URL + "/v3/bill/tradebill?bill_date=" + billDate)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte(`"code":"SIGN_ERROR"`)) {
		t.Errorf("unsigned request: %d %s", resp.StatusCode, body)
	}
}

// A clock a few minutes off still works; past five minutes the channel refuses the request's
// timestamp, and the run says so.
func TestWechatPay_ClockSkew(t *testing.T) {
	for _, c := range []struct {
		skew time.Duration
		ok   bool
	}{{4 * time.Minute, true}, {-6 * time.Minute, false}} {
		t.Run(c.skew.String(), func(t *testing.T) {
			rig := newChannelRig(t, paysim.Config{}, func(cfg *reconcile.Config) {
				cfg.Now = func() time.Time { return time.Now().Add(c.skew) }
			})
			day, date := recentDay()
			rig.charges(day)
			rig.wechatAccount("wx-1900000109")
			run, err := rig.rec.RunJob(rig.ctx, rig.job("wechat-daily", "wx-1900000109", "wechat", ""), date, "daemon", nil)
			if c.ok {
				rig.wantImported(run, err, "wechatpay_v3")
			} else {
				rig.wantRefused(run, err, "HTTP 401 SIGN_ERROR")
			}
		})
	}
}

// WeChat Pay rotates its platform certificate: answers signed by the new one verify while the
// account lists both; an account that still lists only the old one refuses them.
func TestWechatPay_PlatformKeyRotation(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	day, date := recentDay()
	rig.charges(day)
	old := rig.keys.WechatPlatform[0]
	if err := rig.sim.RotateWechatPlatformKey(); err != nil {
		t.Fatal(err)
	}
	keys, _ := rig.sim.ProtocolKeys()
	if len(keys.WechatPlatform) != 2 || keys.WechatPlatform[1].ID != old.ID {
		t.Fatalf("after the rotation paysim lists %+v", keys.WechatPlatform)
	}
	rig.wechatAccount("wx-old", func(s *reconcile.AccountSettings) {
		s.PlatformKeys = s.PlatformKeys[:1]
		s.PlatformKeys[0] = reconcile.PlatformKey(old)
	})
	run, err := rig.rec.RunJob(rig.ctx, rig.job("wechat-old", "wx-old", "wechat", ""), date, "daemon", nil)
	rig.wantRefused(run, err, "signed by a key this account does not know")

	rig.keys = keys
	rig.wechatAccount("wx-both")
	run, err = rig.rec.RunJob(rig.ctx, rig.job("wechat-both", "wx-both", "wechat", ""), date, "daemon", nil)
	rig.wantImported(run, err, "wechatpay_v3 with both keys")
}

// Before 10:00 the next day the bill is still being generated: the run waits, retrying, until
// the job's ready deadline, and imports as soon as it is ready.
func TestWechatPay_NotReadyBefore10IsRetriedUntilTheDeadline(t *testing.T) {
	day, date := recentDay()
	var clock atomic.Int64
	clock.Store(day.AddDate(0, 0, 1).Add(9 * time.Hour).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	rig := newChannelRig(t, paysim.Config{BillReady: paysim.ReadyNextDay10, Now: now}, func(cfg *reconcile.Config) { cfg.Now = now })
	rig.charges(day)
	rig.wechatAccount("wx-1900000109")
	job := rig.job("wechat-daily", "wx-1900000109", "wechat", "")
	run, err := rig.rec.RunJob(rig.ctx, job, date, "daemon", nil)
	if !errors.Is(err, reconcile.ErrNotReady) {
		t.Fatalf("before 10:00 with no deadline: %v", err)
	}
	rig.wantRefused(run, err, "WeChat Pay is still generating the bill (STATEMENT_CREATING)")

	// With a deadline, the run waits; at 10:00 the bill is there.
	job.ReadyDeadlineSeconds = 3600
	p := &clockAt10{clock: &clock, at: day.AddDate(0, 0, 1).Add(10*time.Hour + time.Minute)}
	run, err = rig.rec.RunJob(rig.ctx, job, date, "daemon", p)
	rig.wantImported(run, err, "wechatpay_v3 after 10:00")
	if p.waits < 1 {
		t.Errorf("the run did not wait")
	}
}

// clockAt10 moves the clock to at when the run reports it is waiting.
type clockAt10 struct {
	clock *atomic.Int64
	at    time.Time
	waits int
}

func (c *clockAt10) Report(phase string, _, _ int64) {
	if phase == "waiting" {
		c.waits++
		c.clock.Store(c.at.UnixNano())
	}
}

func TestAlipay_BillThroughTheSignedGateway(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	rig.charges(billDay)
	rig.alipayAccount("alipay-2088")
	job := rig.job("alipay-daily", "alipay-2088", "alipay", "")
	if job.Fetcher != reconcile.FetcherAlipay || job.Bill != "trade" {
		t.Errorf("job fetcher %q bill %q", job.Fetcher, job.Bill)
	}
	run, err := rig.rec.RunJob(rig.ctx, job, billDate, "daemon", nil)
	rig.wantImported(run, err, "alipay")
}

func TestAlipay_RefusalsImportNothing(t *testing.T) {
	gateway := func(f func(*http.Response) error) func(*http.Request, *http.Response) error {
		return func(req *http.Request, resp *http.Response) error {
			if req.URL.Path == "/gateway.do" {
				return f(resp)
			}
			return nil
		}
	}
	for _, c := range []struct {
		name   string
		paysim paysim.Config
		tamper func(*http.Request, *http.Response) error
		appKey int
		want   string
	}{
		{name: "bad signature on the answer", tamper: gateway(func(resp *http.Response) error {
			return replaceBody(resp, func(b []byte) []byte { return bytes.Replace(b, []byte(`"Success"`), []byte(`"success"`), 1) })
		}), appKey: keyApp, want: "Alipay's answer signature does not verify"},
		{name: "unsigned answer", tamper: gateway(func(resp *http.Response) error {
			return replaceBody(resp, func(b []byte) []byte {
				i := bytes.LastIndex(b, []byte(`,"sign":`))
				return append(b[:i:i], '}')
			})
		}), appKey: keyApp, want: "Alipay's answer is not signed"},
		{name: "a request signed by a key Alipay does not know", appKey: keyOtherMerchant,
			want: "Alipay refused the request's signature (40002 isv.invalid-signature)"},
		{name: "expired bill_download_url", paysim: paysim.Config{AlipayDownloadLife: time.Nanosecond}, appKey: keyApp,
			want: "Alipay refused the bill download: HTTP 404"},
		{name: "not a zip", tamper: func(req *http.Request, resp *http.Response) error {
			if req.URL.Path == "/downloadBillFile.resource" {
				return replaceBody(resp, func(b []byte) []byte { return []byte("<html>login</html>") })
			}
			return nil
		}, appKey: keyApp, want: "Alipay's bill download is not a zip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rig := newChannelRig(t, c.paysim)
			rig.charges(billDay)
			rig.account("alipay-2088", reconcile.KindAlipay, reconcile.AccountSettings{AppID: "2021000122600000",
				AlipayPublicKey: rig.keys.AlipayPublicKey}, map[string]reconcile.CredentialInput{
				reconcile.CredAppPrivateKey: {Value: string(chanproto.EncodePrivateKey(rsaKey(c.appKey)))}})
			if c.tamper != nil {
				rig.setTamper(c.tamper)
			}
			run, err := rig.rec.RunJob(rig.ctx, rig.job("alipay-daily", "alipay-2088", "alipay", ""), billDate, "daemon", nil)
			rig.wantRefused(run, err, c.want)
		})
	}
}

func TestStripe_BalanceTransactionsOfThePayoutsThroughStripeGo(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	// Charges three days ago: their payout arrived yesterday. Today's charges are pending.
	utcDay := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
	for i, amount := range []int64{12800, 50} {
		at := utcDay.Add(time.Duration(9+i) * time.Hour)
		if _, err := rig.client.InsertChannelCharge(rig.ctx, paysim.ChannelCharge{AmountMinor: amount, Currency: "USD",
			MerchantOrderNo: "order-" + string(rune('a'+i)), CreatedAt: &at}); err != nil {
			t.Fatal(err)
		}
	}
	rig.account("stripe-acct", reconcile.KindStripe, reconcile.AccountSettings{},
		map[string]reconcile.CredentialInput{reconcile.CredSecretKey: {Value: "sk_test_paysim_0123456789"}})
	job := rig.job("stripe-daily", "stripe-acct", "stripe", "")
	job.TimeZone = "UTC"
	// The payout's arrival day: its transactions and the payout itself, the settlement agreeing.
	arrival := utcDay.AddDate(0, 0, 2).Format(time.DateOnly)
	run, err := rig.rec.RunJob(rig.ctx, job, arrival, "daemon", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run.RowsLoaded != 2 || run.Counts["CHANNEL_ONLY"] != 2 {
		t.Errorf("payout day: loaded %d, counts %v", run.RowsLoaded, run.Counts)
	}
	var settled string
	rig.db.Raw(`SELECT summary->'settlements'->0->>'stated_minor' FROM statements WHERE id = ?`, *run.StatementID).Scan(&settled)
	if settled == "" {
		t.Errorf("no settlement stated by the payout row")
	}
	// The charge day: the same transactions, pending then, without the payout's row.
	run, err = rig.rec.RunJob(rig.ctx, job, utcDay.Format(time.DateOnly), "daemon", nil)
	if err != nil || run.RowsLoaded != 2 {
		t.Errorf("charge day: %+v %v", run, err)
	}

	rig.account("stripe-wrong", reconcile.KindStripe, reconcile.AccountSettings{},
		map[string]reconcile.CredentialInput{reconcile.CredSecretKey: {Value: "sk_test_not_the_key_99"}})
	before, _ := rig.imported()
	run, err = rig.rec.RunJob(rig.ctx, rig.job("stripe-wrong", "stripe-wrong", "stripe", ""), arrival, "daemon", nil)
	if err == nil || run.Error == nil || !strings.Contains(*run.Error, "Stripe refused the secret key (HTTP 401") ||
		strings.Contains(*run.Error, "sk_test") {
		t.Errorf("wrong key: %+v %v", run, err)
	}
	if after, _ := rig.imported(); after != before {
		t.Errorf("a refused fetch imported a statement")
	}
}

func TestAdyen_SettlementDetailsWithAPIKeyOrReportUser(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	rig.charges(billDay)
	date := billDate // the charges are at 01:00-04:00 UTC that day; paysim's batches are UTC days from 1970-01-01
	origin := &reconcile.BatchOrigin{Batch: 0, Date: "1970-01-01"}
	rig.account("adyen-key", reconcile.KindAdyen, reconcile.AccountSettings{MerchantAccount: rig.keys.AdyenMerchant, Auth: "api_key",
		BatchOrigin: origin}, map[string]reconcile.CredentialInput{reconcile.CredAPIKey: {Value: "AQE-paysim-key"}})
	rig.account("adyen-user", reconcile.KindAdyen, reconcile.AccountSettings{MerchantAccount: rig.keys.AdyenMerchant, Auth: "basic",
		BatchOrigin: origin}, map[string]reconcile.CredentialInput{reconcile.CredReportUser: {Value: "report@Company.Paysim"},
		reconcile.CredReportPassword: {Value: "report-password"}})
	rig.account("adyen-bad", reconcile.KindAdyen, reconcile.AccountSettings{MerchantAccount: rig.keys.AdyenMerchant, Auth: "basic",
		BatchOrigin: origin}, map[string]reconcile.CredentialInput{reconcile.CredReportUser: {Value: "report@Company.Paysim"},
		reconcile.CredReportPassword: {Value: "guess"}})
	for _, channel := range []string{"adyen-key", "adyen-user"} {
		job := rig.job(channel, channel, "adyen", "")
		run, err := rig.rec.RunJob(rig.ctx, job, date, "daemon", nil)
		if err != nil || run.Status != reconcile.RunSucceeded || run.Counts["CHANNEL_ONLY"] != 4 {
			t.Errorf("%s: %+v %v", channel, run, err)
		}
	}
	before, _ := rig.imported()
	run, err := rig.rec.RunJob(rig.ctx, rig.job("adyen-bad", "adyen-bad", "adyen", ""), date, "daemon", nil)
	if err == nil || !strings.Contains(*run.Error, "Adyen refused the account's credentials (HTTP 401)") {
		t.Errorf("bad password: %+v %v", run, err)
	}
	if after, _ := rig.imported(); after != before {
		t.Errorf("a refused fetch imported a statement")
	}
}

// Rotation without downtime, both ways: the deployment secret changes (the previous one still
// opens what it sealed until every credential is sealed again under the new one), and the
// merchant's own key changes (the channel knows both certificates during the switch; the
// account swaps key and serial in one statement).
func TestCredentials_RotationWithTwoKeysValid(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	day, date := recentDay()
	rig.charges(day)
	rig.wechatAccount("wx-1900000109")
	job := rig.job("wechat-daily", "wx-1900000109", "wechat", "")
	reconciler := func(k *reconcile.Keyring) *reconcile.Reconciler {
		cfg := rig.rec.Config()
		cfg.Keyring = k
		r, err := reconcile.New(rig.db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	oldSecret, newSecret := []byte("test-deployment-secret-0123"), []byte("the-next-deployment-secret-4567")
	during, _ := reconcile.NewKeyring(newSecret, oldSecret)
	after, _ := reconcile.NewKeyring(newSecret)
	run := func(r *reconcile.Reconciler) (*reconcile.Run, error) {
		rig.db.Exec(`TRUNCATE statements, statement_lines, recon_runs, discrepancies`)
		return r.RunJob(rig.ctx, job, date, "daemon", nil)
	}
	// A new secret alone does not open what the old one sealed.
	r, err := run(reconciler(after))
	rig.wantRefused(r, err, "does not open with the deployment secret")
	// During the switch both are valid; the credentials are then sealed again.
	r, err = run(reconciler(during))
	rig.wantImported(r, err, "during the switch")
	n, err := reconciler(during).RekeyCredentials(rig.ctx)
	if err != nil || n != 1 {
		t.Fatalf("rekey: %d, %v", n, err)
	}
	r, err = run(reconciler(after))
	rig.wantImported(r, err, "after the switch")

	// The merchant's key: WeChat Pay knows the new certificate while the old one is still
	// valid; the account swaps its key and serial at once.
	next := rsaKey(keyOtherMerchant)
	if err := rig.sim.AddMerchant(paysim.Merchant{WechatSerial: "6A6B6C6D", WechatPublicKey: string(chanproto.EncodePublicKey(&next.PublicKey))}); err != nil {
		t.Fatal(err)
	}
	now := reconciler(after)
	r, err = run(now) // the old key, still valid at the channel
	rig.wantImported(r, err, "the old merchant key")
	if _, err := now.SetCredential(rig.ctx, rig.db, "wx-1900000109", reconcile.CredMerchantPrivateKey,
		reconcile.CredentialInput{Value: string(chanproto.EncodePrivateKey(next)), Label: "6A6B6C6D"}, "operator:root"); err != nil {
		t.Fatal(err)
	}
	r, err = run(now)
	rig.wantImported(r, err, "the new merchant key")
}

// stepClock is the wall clock moved on by hand: a test makes time pass for the code under test
// without waiting for it.
type stepClock struct{ offset atomic.Int64 }

func (c *stepClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *stepClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
