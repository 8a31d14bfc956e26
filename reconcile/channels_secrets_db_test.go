package reconcile_test

import (
	"bytes"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/syncbuf"
	"github.com/idemops/idemops/reconcile"
)

// pemBody is a PEM text's base64 body on one line.
func pemBody(text string) string {
	var body strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if line != "" && !strings.HasPrefix(line, "-----") {
			body.WriteString(strings.TrimSpace(line))
		}
	}
	return body.String()
}

// keyFragments are pieces of a private key that must never show: every 16-character window of
// its PEM body (a line quoting any part of the key is caught) but the ASN.1 header every key
// shares and the windows its public key's PEM also holds (the modulus is public), and the
// leading digits of its private exponent and first prime in decimal and hex (a key printed as a
// struct).
func keyFragments(k *rsa.PrivateKey) []string {
	b, public := pemBody(string(chanproto.EncodePrivateKey(k))), pemBody(string(chanproto.EncodePublicKey(&k.PublicKey)))
	out := []string{"PRIVATE KEY", k.D.String()[:24], k.Primes[0].String()[:24], k.D.Text(16)[:24], k.Primes[0].Text(16)[:24]}
	for i := 32; i+16 <= len(b); i += 8 {
		if w := b[i : i+16]; !strings.Contains(public, w) {
			out = append(out, w)
		}
	}
	return out
}

// Credentials are never logged nor shown: every signing channel's fetch, succeeding and refused
// (a bad answer signature, a key or password the channel does not know), runs with a debug-level
// logger capturing everything; neither the log, the runs' errors (as returned and as stored), nor
// the audit rows hold any piece of a private key, API key, secret key, password or basic-auth
// token.
func TestCredentials_NeverInTheLogOrTheRunsErrors(t *testing.T) {
	logs := &syncbuf.Buffer{}
	rig := newChannelRig(t, paysim.Config{}, func(cfg *reconcile.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	day, date := recentDay()
	rig.charges(day)
	rig.charges(billDay)
	stripeDay := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
	at := stripeDay.Add(9 * time.Hour)
	if _, err := rig.client.InsertChannelCharge(rig.ctx, paysim.ChannelCharge{AmountMinor: 12800, Currency: "USD",
		MerchantOrderNo: "order-usd", CreatedAt: &at}); err != nil {
		t.Fatal(err)
	}

	otherPEM := string(chanproto.EncodePrivateKey(rsaKey(keyOtherMerchant)))
	const (
		stripeKey, stripeWrong = "sk_test_paysim_0123456789", "sk_test_wrong_key_5566778899"
		adyenKey, adyenWrong   = "AQE-paysim-key", "AQE-wrong-key-77881122"
		reportUser             = "report@Company.Paysim"
		password, wrongPass    = "report-password", "wrong-password-99114433"
	)
	var secrets []string
	for _, k := range []int{keyMerchant, keyApp, keyOtherMerchant} {
		secrets = append(secrets, keyFragments(rsaKey(k))...)
	}
	secrets = append(secrets, stripeKey, stripeWrong, adyenKey, adyenWrong, password, wrongPass,
		base64.StdEncoding.EncodeToString([]byte(reportUser+":"+password)),
		base64.StdEncoding.EncodeToString([]byte(reportUser+":"+wrongPass)),
		"test-deployment-secret-0123")

	rig.wechatAccount("wx-good")
	rig.account("wx-unknown-key", reconcile.KindWechatPay, reconcile.AccountSettings{MchID: rig.keys.WechatMchID,
		PlatformKeys: []reconcile.PlatformKey{{ID: rig.keys.WechatPlatform[0].ID, PEM: rig.keys.WechatPlatform[0].PEM}}},
		map[string]reconcile.CredentialInput{reconcile.CredMerchantPrivateKey: {Value: otherPEM, Label: merchantSerial}})
	rig.alipayAccount("alipay-good")
	rig.account("alipay-unknown-key", reconcile.KindAlipay, reconcile.AccountSettings{AppID: "2021000122600000",
		AlipayPublicKey: rig.keys.AlipayPublicKey}, map[string]reconcile.CredentialInput{reconcile.CredAppPrivateKey: {Value: otherPEM}})
	rig.account("stripe-good", reconcile.KindStripe, reconcile.AccountSettings{},
		map[string]reconcile.CredentialInput{reconcile.CredSecretKey: {Value: stripeKey}})
	rig.account("stripe-wrong", reconcile.KindStripe, reconcile.AccountSettings{},
		map[string]reconcile.CredentialInput{reconcile.CredSecretKey: {Value: stripeWrong}})
	origin := &reconcile.BatchOrigin{Batch: 0, Date: "1970-01-01"}
	adyen := func(channel, auth string, creds map[string]reconcile.CredentialInput) {
		rig.account(channel, reconcile.KindAdyen, reconcile.AccountSettings{MerchantAccount: rig.keys.AdyenMerchant, Auth: auth,
			BatchOrigin: origin}, creds)
	}
	adyen("adyen-key", "api_key", map[string]reconcile.CredentialInput{reconcile.CredAPIKey: {Value: adyenKey}})
	adyen("adyen-wrong-key", "api_key", map[string]reconcile.CredentialInput{reconcile.CredAPIKey: {Value: adyenWrong}})
	adyen("adyen-user", "basic", map[string]reconcile.CredentialInput{reconcile.CredReportUser: {Value: reportUser},
		reconcile.CredReportPassword: {Value: password}})
	adyen("adyen-wrong-password", "basic", map[string]reconcile.CredentialInput{reconcile.CredReportUser: {Value: reportUser},
		reconcile.CredReportPassword: {Value: wrongPass}})

	// The answer's signature broken on the way, for the two channels that sign their answers.
	badSignature := func(req *http.Request, resp *http.Response) error {
		switch {
		case strings.HasSuffix(req.URL.Path, "/v3/bill/tradebill"):
			return replaceBody(resp, func(b []byte) []byte { return bytes.Replace(b, []byte(`"SHA1"`), []byte(`"sha1"`), 1) })
		case req.URL.Path == "/gateway.do":
			return replaceBody(resp, func(b []byte) []byte { return bytes.Replace(b, []byte(`"Success"`), []byte(`"success"`), 1) })
		}
		return nil
	}
	var errorsShown []string
	for _, c := range []struct {
		channel, format, date string
		tamper                func(*http.Request, *http.Response) error
		refusal               string // empty: the run succeeds
	}{
		{"wx-good", "wechat", date, nil, ""},
		{"wx-good", "wechat", date, badSignature, "WeChat Pay's answer signature does not verify"},
		{"wx-unknown-key", "wechat", date, nil, "WeChat Pay refused the request's signature (HTTP 401 SIGN_ERROR)"},
		{"alipay-good", "alipay", billDate, nil, ""},
		{"alipay-good", "alipay", billDate, badSignature, "Alipay's answer signature does not verify"},
		{"alipay-unknown-key", "alipay", billDate, nil, "Alipay refused the request's signature (40002 isv.invalid-signature)"},
		{"stripe-good", "stripe", stripeDay.Format(time.DateOnly), nil, ""},
		{"stripe-wrong", "stripe", stripeDay.Format(time.DateOnly), nil, "Stripe refused the secret key (HTTP 401"},
		{"adyen-key", "adyen", billDate, nil, ""},
		{"adyen-wrong-key", "adyen", billDate, nil, "Adyen refused the account's credentials (HTTP 401)"},
		{"adyen-user", "adyen", billDate, nil, ""},
		{"adyen-wrong-password", "adyen", billDate, nil, "Adyen refused the account's credentials (HTTP 401)"},
	} {
		if c.tamper != nil {
			rig.setTamper(c.tamper)
		} else {
			rig.tamper.Store(nil)
		}
		job, err := rig.rec.GetJob(rig.ctx, c.channel)
		if err != nil {
			job = rig.job(c.channel, c.channel, c.format, "")
		}
		if c.format == "stripe" {
			job.TimeZone = "UTC"
		}
		run, err := rig.rec.RunJob(rig.ctx, job, c.date, "daemon", nil)
		if c.refusal == "" {
			if err != nil || run.Status != reconcile.RunSucceeded {
				t.Fatalf("%s: %+v, %v", c.channel, run, err)
			}
			continue
		}
		if err == nil || run == nil || run.Error == nil || !strings.Contains(*run.Error, c.refusal) {
			t.Fatalf("%s: want a run refused with %q; got %+v, %v", c.channel, c.refusal, run, err)
		}
		errorsShown = append(errorsShown, err.Error(), *run.Error)
	}

	var stored []string
	if err := rig.db.Raw(`SELECT coalesce(error, '') || ' ' || coalesce(error_phrase::text, '') FROM recon_runs`).Scan(&stored).Error; err != nil {
		t.Fatal(err)
	}
	audit, _ := json.Marshal(rig.audit.all())
	log := logs.String()
	// The log is not empty: it has a line per refused run and per fetched statement.
	if n := strings.Count(log, "recon run failed"); n != 7 {
		t.Errorf("%d 'recon run failed' lines in the log; want one per refused run (7):\n%s", n, log)
	}
	if n := strings.Count(log, "statement fetched"); n < 5 {
		t.Errorf("%d 'statement fetched' lines in the log; want one per fetch that got its bill:\n%s", n, log)
	}
	for what, text := range map[string]string{"the log": log, "the errors returned": strings.Join(errorsShown, "\n"),
		"the runs' stored errors": strings.Join(stored, "\n"), "the audit rows": string(audit)} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %q, a piece of a credential", what, s)
			}
		}
	}
}

// A credential may be a file the deployment provides (a mounted secret) instead of a sealed
// value: nothing is sealed, the file is read at each fetch (a key replaced in the file is used by
// the next run), and a file gone fails the run with one line naming the credential, not the path
// or its content.
func TestCredentials_FromAFileReadAtEachFetch(t *testing.T) {
	rig := newChannelRig(t, paysim.Config{})
	rig.charges(billDay)
	path := filepath.Join(t.TempDir(), "app_private_key.pem")
	if err := os.WriteFile(path, chanproto.EncodePrivateKey(rsaKey(keyApp)), 0o600); err != nil {
		t.Fatal(err)
	}
	rig.account("alipay-2088", reconcile.KindAlipay, reconcile.AccountSettings{AppID: "2021000122600000",
		AlipayPublicKey: rig.keys.AlipayPublicKey}, map[string]reconcile.CredentialInput{reconcile.CredAppPrivateKey: {File: path}})
	var sealed int64
	rig.db.Raw(`SELECT count(*) FROM channel_credentials WHERE file = ? AND sealed IS NULL AND key_id = ''`, path).Scan(&sealed)
	if sealed != 1 {
		t.Errorf("the file credential is stored %d times as a path with nothing sealed; want once", sealed)
	}
	job := rig.job("alipay-daily", "alipay-2088", "alipay", "")
	run, err := rig.rec.RunJob(rig.ctx, job, billDate, "daemon", nil)
	rig.wantImported(run, err, "alipay with the key from a file")

	rig.db.Exec(`TRUNCATE statements, statement_lines, recon_runs, discrepancies`)
	if err := os.WriteFile(path, chanproto.EncodePrivateKey(rsaKey(keyOtherMerchant)), 0o600); err != nil {
		t.Fatal(err)
	}
	run, err = rig.rec.RunJob(rig.ctx, job, billDate, "daemon", nil)
	rig.wantRefused(run, err, "Alipay refused the request's signature (40002 isv.invalid-signature)")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	run, err = rig.rec.RunJob(rig.ctx, job, billDate, "daemon", nil)
	rig.wantRefused(run, err, "the app_private_key credential's file cannot be read")
	if strings.Contains(*run.Error, path) {
		t.Errorf("the run's error %q names the file's path", *run.Error)
	}
}
