package paysim_test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/downstream/paysim"
)

// paysim speaks the channels' statement protocols: it checks the merchant's signature or key as
// each channel does and refuses with the channel's own answer, signs its answers, and serves
// bills behind download URLs that expire. (reconcile's channel tests fetch through all of it.)

var (
	protoKeysOnce sync.Once
	protoKeys     [3]*rsa.PrivateKey // merchant, paysim platform, paysim alipay
)

func protoKey(i int) *rsa.PrivateKey {
	protoKeysOnce.Do(func() {
		for i := range protoKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			protoKeys[i] = k
		}
	})
	return protoKeys[i]
}

const serial = "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C"

// protoServer is paysim with one registered merchant, on a test server.
func protoServer(t *testing.T, cfg paysim.Config) (*paysim.Server, string) {
	t.Helper()
	cfg.WechatPlatformKey, cfg.AlipayKey = protoKey(1), protoKey(2)
	srv, err := paysim.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, srv)
	if err := srv.AddMerchant(paysim.Merchant{WechatSerial: serial, WechatPublicKey: string(chanproto.EncodePublicKey(&protoKey(0).PublicKey)),
		AlipayAppID: "2021000122600000", AlipayPublicKey: string(chanproto.EncodePublicKey(&protoKey(0).PublicKey)),
		StripeSecretKey: "sk_test_merchant_01", AdyenAPIKey: "AQE-key", AdyenReportUser: "report@Company.X", AdyenReportPassword: "pw"}); err != nil {
		t.Fatal(err)
	}
	return srv, ts
}

func newTestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

func get(t *testing.T, u string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func wechatGet(t *testing.T, base, pathQuery string, key *rsa.PrivateKey, at time.Time) (*http.Response, []byte) {
	t.Helper()
	auth, err := chanproto.SignWechatRequest(key, "1900000109", serial, http.MethodGet, pathQuery, nil, at)
	if err != nil {
		t.Fatal(err)
	}
	return get(t, base+pathQuery, http.Header{"Authorization": {auth}})
}

func TestWechatAPI_RefusesUnsignedAndBadlySignedRequestsWith401SignError(t *testing.T) {
	_, base := protoServer(t, paysim.Config{})
	date := time.Now().In(paysim.Shanghai).AddDate(0, 0, -1).Format("2006-01-02")
	path := "/v3/bill/tradebill?bill_date=" + date + "&bill_type=ALL"
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for name, do := range map[string]func() (*http.Response, []byte){
		"unsigned":              func() (*http.Response, []byte) { return get(t, base+path, nil) },
		"signed by another key": func() (*http.Response, []byte) { return wechatGet(t, base, path, other, time.Now()) },
		"a timestamp 6 minutes old": func() (*http.Response, []byte) {
			return wechatGet(t, base, path, protoKey(0), time.Now().Add(-6*time.Minute))
		},
		"signed for another path":                            func() (*http.Response, []byte) { return wechatGetSignedFor(t, base, path, path+"&x=1") },
		"an unknown certificate (WeChat Pay's download too)": func() (*http.Response, []byte) { return get(t, base+"/v3/billdownload/file?token=x", nil) },
	} {
		resp, body := do()
		var e struct{ Code string }
		json.Unmarshal(body, &e)
		if resp.StatusCode != http.StatusUnauthorized || e.Code != "SIGN_ERROR" {
			t.Errorf("%s: %d %s; want 401 SIGN_ERROR", name, resp.StatusCode, body)
		}
	}
}

// wechatGetSignedFor signs one path and requests another.
func wechatGetSignedFor(t *testing.T, base, requested, signed string) (*http.Response, []byte) {
	auth, _ := chanproto.SignWechatRequest(protoKey(0), "1900000109", serial, http.MethodGet, signed, nil, time.Now())
	return get(t, base+requested, http.Header{"Authorization": {auth}})
}

func TestWechatAPI_SignedAnswerHashAndExpiringDownload(t *testing.T) {
	c := &clock{}
	c.t = time.Now()
	sim, base := protoServer(t, paysim.Config{Now: c.Now, WechatDownloadLife: time.Minute})
	keys, _ := sim.ProtocolKeys()
	platform, err := chanproto.ParsePublicKey([]byte(keys.WechatPlatform[0].PEM), keys.WechatPlatform[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	date := c.Now().In(paysim.Shanghai).AddDate(0, 0, -1).Format("2006-01-02")
	resp, body := wechatGet(t, base, "/v3/bill/tradebill?bill_date="+date+"&bill_type=ALL&tar_type=GZIP", protoKey(0), c.Now())
	if resp.StatusCode != 200 {
		t.Fatalf("bill query: %d %s", resp.StatusCode, body)
	}
	if err := chanproto.VerifyWechatAnswer(resp.Header, body, chanproto.WechatKeys{platform.ID: platform.Key}, c.Now()); err != nil {
		t.Fatalf("answer signature: %v", err)
	}
	var a struct{ HashType, HashValue, DownloadURL string }
	json.Unmarshal(body, &struct {
		HashType    *string `json:"hash_type"`
		HashValue   *string `json:"hash_value"`
		DownloadURL *string `json:"download_url"`
	}{&a.HashType, &a.HashValue, &a.DownloadURL})
	u, _ := url.Parse(a.DownloadURL)
	resp, gz := wechatGet(t, base, u.RequestURI(), protoKey(0), c.Now())
	if resp.StatusCode != 200 || resp.Header.Get(chanproto.HeaderWechatSignature) != "" {
		t.Fatalf("download: %d, signature header %q (a download is unsigned)", resp.StatusCode, resp.Header.Get(chanproto.HeaderWechatSignature))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	sum := sha1.Sum(plain)
	if a.HashType != "SHA1" || hex.EncodeToString(sum[:]) != a.HashValue {
		t.Errorf("hash_value %s %s; the decompressed bill's SHA1 is %x", a.HashType, a.HashValue, sum)
	}
	c.t = c.t.Add(61 * time.Second)
	resp, body = wechatGet(t, base, u.RequestURI(), protoKey(0), c.Now())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "INVALID_REQUEST") {
		t.Errorf("download after the URL's life: %d %s", resp.StatusCode, body)
	}
}

func TestWechatAPI_NotReadyBefore10NextDay(t *testing.T) {
	c := &clock{}
	c.Set("2025-06-02T01:59:00Z") // 09:59 in Shanghai
	_, base := protoServer(t, paysim.Config{Now: c.Now, BillReady: paysim.ReadyNextDay10})
	resp, body := wechatGet(t, base, "/v3/bill/tradebill?bill_date=2025-06-01", protoKey(0), c.Now())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "STATEMENT_CREATING") {
		t.Errorf("09:59: %d %s", resp.StatusCode, body)
	}
	c.Set("2025-06-02T02:00:00Z")
	if resp, body = wechatGet(t, base, "/v3/bill/tradebill?bill_date=2025-06-01", protoKey(0), c.Now()); resp.StatusCode != 200 {
		t.Errorf("10:00: %d %s", resp.StatusCode, body)
	}
}

func TestAlipayGateway_RefusesUnsignedRequestsAndSignsAnswers(t *testing.T) {
	sim, base := protoServer(t, paysim.Config{})
	keys, _ := sim.ProtocolKeys()
	alipayKey, _ := chanproto.ParsePublicKey([]byte(keys.AlipayPublicKey), "")
	params := func() url.Values {
		return url.Values{"app_id": {"2021000122600000"}, "method": {"alipay.data.dataservice.bill.downloadurl.query"},
			"charset": {"utf-8"}, "sign_type": {"RSA2"}, "version": {"1.0"},
			"timestamp":   {time.Now().In(paysim.Shanghai).Format("2006-01-02 15:04:05")},
			"biz_content": {`{"bill_type":"trade","bill_date":"` + time.Now().In(paysim.Shanghai).AddDate(0, 0, -1).Format("2006-01-02") + `"}`}}
	}
	post := func(p url.Values) map[string]map[string]string {
		resp, err := http.PostForm(base+"/gateway.do", p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]json.RawMessage
		json.Unmarshal(b, &out)
		m := map[string]map[string]string{}
		for k, v := range out {
			var inner map[string]string
			if json.Unmarshal(v, &inner) == nil {
				m[k] = inner
			}
		}
		if a, err := chanproto.ParseAlipayAnswer(b, "alipay.data.dataservice.bill.downloadurl.query"); err == nil && a.Member != "error_response" {
			if err := a.Verify(alipayKey.Key); err != nil {
				t.Errorf("a success answer that does not verify: %v", err)
			}
		}
		return m
	}
	unsigned := post(params())
	if e := unsigned["error_response"]; e["code"] != "40001" || e["sub_code"] != "isv.missing-signature" {
		t.Errorf("unsigned: %v", unsigned)
	}
	p := params()
	chanproto.SignAlipayRequest(protoKey(0), p)
	p.Set("biz_content", strings.Replace(p.Get("biz_content"), "trade", "signcustomer", 1))
	if e := post(p)["error_response"]; e["code"] != "40002" || e["sub_code"] != "isv.invalid-signature" {
		t.Errorf("changed after signing: %v", e)
	}
	p = params()
	chanproto.SignAlipayRequest(protoKey(0), p)
	ok := post(p)["alipay_data_dataservice_bill_downloadurl_query_response"]
	if ok["code"] != "10000" || !strings.Contains(ok["bill_download_url"], "/downloadBillFile.resource?") {
		t.Fatalf("signed request: %v", ok)
	}
	resp, body := get(t, ok["bill_download_url"], nil)
	if resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte("PK\x03\x04")) {
		t.Errorf("bill download: %d", resp.StatusCode)
	}
}

func TestStripeAndAdyen_Refuse401WithTheirOwnErrors(t *testing.T) {
	_, base := protoServer(t, paysim.Config{})
	resp, body := get(t, base+"/v1/balance_transactions", nil)
	if resp.StatusCode != 401 || !strings.Contains(string(body), "You did not provide an API key") {
		t.Errorf("Stripe without a key: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, base+"/v1/payouts", http.Header{"Authorization": {"Bearer sk_test_wrong_key_0000"}})
	if resp.StatusCode != 401 || !strings.Contains(string(body), "Invalid API Key provided: sk_test_****0000") {
		t.Errorf("Stripe with a wrong key: %d %s", resp.StatusCode, body)
	}
	if resp, body = get(t, base+"/v1/payouts", http.Header{"Authorization": {"Bearer sk_test_merchant_01"}}); resp.StatusCode != 200 {
		t.Errorf("Stripe with the key: %d %s", resp.StatusCode, body)
	}
	file := base + "/reports/download/MerchantAccount/PaysimMerchantCOM/settlement_detail_report_batch_19000.csv"
	resp, body = get(t, file, http.Header{"X-API-Key": {"wrong"}})
	if resp.StatusCode != 401 || !strings.Contains(string(body), `"errorType":"security"`) {
		t.Errorf("Adyen with a wrong key: %d %s", resp.StatusCode, body)
	}
	for name, h := range map[string]http.Header{"API key": {"X-API-Key": {"AQE-key"}},
		"report user": {"Authorization": {"Basic " + basic("report@Company.X", "pw")}}} {
		if resp, body = get(t, file, h); resp.StatusCode != 200 || !strings.HasPrefix(string(body), "Company Account,") {
			t.Errorf("Adyen with the %s: %d %s", name, resp.StatusCode, body)
		}
	}
}
