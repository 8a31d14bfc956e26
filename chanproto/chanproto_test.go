package chanproto

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

var (
	keysOnce sync.Once
	testKeys []*rsa.PrivateKey
)

// key returns the i-th test key (0..2), generated once per test binary.
func key(t *testing.T, i int) *rsa.PrivateKey {
	t.Helper()
	keysOnce.Do(func() {
		for range 3 {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			testKeys = append(testKeys, k)
		}
	})
	return testKeys[i]
}

// The signing string of WeChat Pay APIv3's published example (签名生成, "构造签名串":
// https://pay.weixin.qq.com/doc/v3/merchant/4012365336, also
// https://wechatpay-api.gitbook.io/wechatpay-api-v3/qian-ming-zhi-nan-1/qian-ming-sheng-cheng): a GET
// of /v3/certificates at 1554208460 with nonce 593BEC0C930BF1AFEB40B4A08C8FB242 and no body.
// The docs publish no private key, so the vector fixes the signed bytes; the RSA step is checked
// against our own keys below.
func TestWechatRequestMessage_PublishedExample(t *testing.T) {
	got := WechatRequestMessage("GET", "/v3/certificates", 1554208460, "593BEC0C930BF1AFEB40B4A08C8FB242", nil)
	want := "GET\n/v3/certificates\n1554208460\n593BEC0C930BF1AFEB40B4A08C8FB242\n\n"
	if string(got) != want {
		t.Fatalf("signing string %q, want %q", got, want)
	}
	// A body is its own line: a POST's JSON, then the closing newline.
	got = WechatRequestMessage("POST", "/v3/pay/transactions/native", 1554208460, "N", []byte(`{"a":1}`))
	if string(got) != "POST\n/v3/pay/transactions/native\n1554208460\nN\n{\"a\":1}\n" {
		t.Fatalf("POST signing string %q", got)
	}
}

// The Authorization header of WeChat Pay's published bill download example (下载账单,
// https://pay.weixin.qq.com/wiki/doc/apiv3/apis/chapter7_3_9.shtml): read, then written back
// byte for byte.
func TestWechatAuthorization_PublishedExample(t *testing.T) {
	const header = `WECHATPAY2-SHA256-RSA2048 mchid="1900009191",nonce_str="593BEC0C930BF1AFEB40B4A08C8FB242",` +
		`signature="uOVRnA4qG/MNnYzdQxJanN+zU+lTgIcnU9BxGw5dKjK+VdEUz2FeIoC+D5sB/LN+nGzX3hfZg6r5wT1pl2ZobmIc6p0ldN7J6yDgUzbX8Uk3sD4a4eZVPTBvqNDoUqcYMlZ9uuDdCvNv4TM3c1WzsXUrExwVkI1XO5jCNbgDJ25nkT/c1gIFvqoogl7MdSFGc4W4xZsqCItnqbypR3RuGIlR9h9vlRsy7zJR9PBI83X8alLDIfR1ukt1P7tMnmogZ0cuDY8cZsd8ZlCgLadmvej58SLsIkVxFJ8XyUgx9FmutKSYTmYtWBZ0+tNvfGmbXU7cob8H/4nLBiCwIUFluw==",` +
		`timestamp="1554208460",serial_no="1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C"`
	a, err := ParseWechatAuthorization(header)
	if err != nil {
		t.Fatal(err)
	}
	if a.MchID != "1900009191" || a.Timestamp != 1554208460 || a.SerialNo != "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C" ||
		a.Nonce != "593BEC0C930BF1AFEB40B4A08C8FB242" {
		t.Fatalf("parsed %+v", a)
	}
	if a.String() != header {
		t.Fatalf("written back:\n%s\nwant\n%s", a.String(), header)
	}
	for _, bad := range []string{"", "Bearer x", WechatScheme + ` mchid="1"`, WechatScheme + ` mchid=1,nonce_str="a"`} {
		if _, err := ParseWechatAuthorization(bad); !errors.Is(err, ErrAuthorization) {
			t.Errorf("%q: err %v, want ErrAuthorization", bad, err)
		}
	}
}

// Alipay's published example of the string to sign (自行实现签名, "筛选并排序 / 拼接":
// https://opendocs.alipay.com/common/02kf5q): the request's parameters without sign, sorted,
// raw values joined by &.
func TestAlipaySignContent_PublishedExample(t *testing.T) {
	biz := `{"button":[{"actionParam":"ZFB_HFCZ","actionType":"out","name":"话费充值"},{"name":"查询","subButton":[{"actionParam":"ZFB_YECX","actionType":"out","name":"余额查询"},{"actionParam":"ZFB_LLCX","actionType":"out","name":"流量查询"},{"actionParam":"ZFB_HFCX","actionType":"out","name":"话费查询"}]},{"actionParam":"http://m.alipay.com","actionType":"link","name":"最新优惠"}]}`
	params := url.Values{
		"app_id": {"2014072300007148"}, "method": {"alipay.mobile.public.menu.add"}, "charset": {"GBK"},
		"sign_type": {"RSA2"}, "timestamp": {"2014-07-24 03:07:50"}, "biz_content": {biz}, "version": {"1.0"},
		"sign":  {"e9zEAe4TTQ4LPLQvETPoLGXTiURcxiAKfMVQ6Hrrsx2hmyIEGvSfAQzbLxHrhyZ48wOJXTsD4FPnt+YGdK57+fP1BCbf9rIVycfjhYCqlFhbTu9pFnZgT55W+xbAFb9y7vL0MyAxwXUXvZtQVqEwW7pURtKilbcBTEW7TAxzgro="},
		"empty": {""},
	}
	want := "app_id=2014072300007148&biz_content=" + biz +
		"&charset=GBK&method=alipay.mobile.public.menu.add&sign_type=RSA2&timestamp=2014-07-24 03:07:50&version=1.0"
	if got := string(AlipaySignContent(params)); got != want {
		t.Fatalf("sign content\n%s\nwant\n%s", got, want)
	}
}

// The answer of Alipay's published bill query example (alipay.data.dataservice.bill.downloadurl.query,
// 响应示例: https://opendocs.alipay.com/apis/api_15/alipay.data.dataservice.bill.downloadurl.query):
// the signed text is the member exactly as written, whitespace included.
func TestParseAlipayAnswer_PublishedExample(t *testing.T) {
	member := `{"code":"10000","msg":"Success","bill_download_url":"http://dwbillcenter.alipay.com/downloadBillFile.resource?bizType=X&userId=X&fileType=X&bizDates=X&downloadFileName=X&fileId=X"}`
	body := `{"alipay_data_dataservice_bill_downloadurl_query_response":` + member + `,"sign":"ERITJKEIJKJHKKKKKKKHJEREEEEEEEEEEE"}`
	a, err := ParseAlipayAnswer([]byte(body), "alipay.data.dataservice.bill.downloadurl.query")
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Content) != member || a.Sign != "ERITJKEIJKJHKKKKKKKHJEREEEEEEEEEEE" {
		t.Fatalf("parsed %s / %s", a.Content, a.Sign)
	}
	// A spaced member is signed as spaced.
	spaced := `{ "code" : "10000" }`
	a, _ = ParseAlipayAnswer([]byte(`{"x_response": `+spaced+`, "sign":"s"}`), "x")
	if string(a.Content) != spaced {
		t.Fatalf("spaced member %q", a.Content)
	}
	if _, err := ParseAlipayAnswer([]byte(`{"other":1}`), "x"); !errors.Is(err, ErrAlipayAnswer) {
		t.Fatalf("no member: %v", err)
	}
}

func TestAlipay_SignAndVerify(t *testing.T) {
	app, alipay := key(t, 0), key(t, 1)
	params := url.Values{"app_id": {"2021"}, "method": {"m"}, "biz_content": {`{"bill_type":"trade"}`}}
	if err := SignAlipayRequest(app, params); err != nil {
		t.Fatal(err)
	}
	if err := VerifyAlipayRequest(&app.PublicKey, params); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	params.Set("biz_content", `{"bill_type":"signcustomer"}`)
	if err := VerifyAlipayRequest(&app.PublicKey, params); !errors.Is(err, ErrSignature) {
		t.Fatalf("changed parameter: %v", err)
	}
	body, err := SignAlipayAnswer(alipay, "m_response", []byte(`{"code":"10000"}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseAlipayAnswer(body, "m")
	if err != nil || a.Verify(&alipay.PublicKey) != nil {
		t.Fatalf("signed answer %s: %v", body, err)
	}
	if err := a.Verify(&app.PublicKey); !errors.Is(err, ErrSignature) {
		t.Fatalf("other key: %v", err)
	}
	tampered := bytes.Replace(body, []byte("10000"), []byte("10001"), 1)
	a, _ = ParseAlipayAnswer(tampered, "m")
	if err := a.Verify(&alipay.PublicKey); !errors.Is(err, ErrSignature) {
		t.Fatalf("tampered answer: %v", err)
	}
}

func TestVerifyWechatAnswer(t *testing.T) {
	platform, next := key(t, 0), key(t, 1)
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"hash_type":"SHA1"}`)
	signed := func(k *rsa.PrivateKey, serial string, at time.Time) http.Header {
		h := http.Header{}
		if err := SignWechatAnswer(h, k, serial, body, at); err != nil {
			t.Fatal(err)
		}
		return h
	}
	keys := WechatKeys{"5157F09EFDC096DE15EBE81A47057A7232F1B8E1": &platform.PublicKey}
	if err := VerifyWechatAnswer(signed(platform, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now), body, keys, now); err != nil {
		t.Fatalf("good answer: %v", err)
	}
	// Public-key mode: the serial is the key's ID.
	pk := WechatKeys{"PUB_KEY_ID_0114232134912410000000000000": &platform.PublicKey}
	if err := VerifyWechatAnswer(signed(platform, "PUB_KEY_ID_0114232134912410000000000000", now), body, pk, now); err != nil {
		t.Fatalf("public key mode: %v", err)
	}
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"unsigned", http.Header{}, body, ErrUnsigned},
		{"wrong serial", signed(next, "7777", now), body, ErrWrongSerial},
		{"signed by another key under the known serial", signed(next, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now), body, ErrSignature},
		{"body changed", signed(platform, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now), []byte(`{"hash_type":"MD5"}`), ErrSignature},
		{"clock 5 min behind", signed(platform, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now.Add(-5*time.Minute)), body, ErrClockSkew},
		{"clock 6 min ahead", signed(platform, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now.Add(6*time.Minute)), body, ErrClockSkew},
	}
	for _, c := range cases {
		if err := VerifyWechatAnswer(c.h, c.body, keys, now); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	// 4m59s of skew is accepted: the SDKs refuse five minutes and more.
	if err := VerifyWechatAnswer(signed(platform, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", now.Add(-299*time.Second)), body, keys, now); err != nil {
		t.Fatalf("skew under five minutes: %v", err)
	}
	// Rotation: while both certificates are known, either serial verifies.
	both := WechatKeys{"OLD": &platform.PublicKey, "NEW": &next.PublicKey}
	for serial, k := range map[string]*rsa.PrivateKey{"OLD": platform, "NEW": next} {
		if err := VerifyWechatAnswer(signed(k, serial, now), body, both, now); err != nil {
			t.Errorf("rotation, %s: %v", serial, err)
		}
	}
}

func TestWechatBill_EncryptDecrypt(t *testing.T) {
	merchant, other := key(t, 0), key(t, 2)
	plain := []byte("`2024-01-02 10:00:00,`wx1\n")
	ek, nonce, ct, err := EncryptWechatBill(&merchant.PublicKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(nonce) != 16 || len(ct) != len(plain)+16 {
		t.Fatalf("nonce %q, ciphertext %d bytes", nonce, len(ct))
	}
	got, err := DecryptWechatBill(merchant, ek, nonce, bytes.Clone(ct))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("decrypted %q, %v", got, err)
	}
	flipped := bytes.Clone(ct)
	flipped[3] ^= 1
	if _, err := DecryptWechatBill(merchant, ek, nonce, flipped); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("tampered part: %v", err)
	}
	if _, err := DecryptWechatBill(other, ek, nonce, bytes.Clone(ct)); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("another merchant's key: %v", err)
	}
	if _, err := DecryptWechatBill(merchant, ek, "0000000000000000", bytes.Clone(ct)); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong nonce: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	k := key(t, 0)
	if got, err := ParsePrivateKey(EncodePrivateKey(k)); err != nil || !got.Equal(k) {
		t.Fatalf("PKCS #8: %v", err)
	}
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	if got, err := ParsePrivateKey(pkcs1); err != nil || !got.Equal(k) {
		t.Fatalf("PKCS #1: %v", err)
	}
	// Alipay's key tool shows a bare base64 body.
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	block := pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: der})
	bare := bytes.Join(bytes.Split(block, []byte("\n"))[1:], nil)
	bare = bytes.TrimSuffix(bare, []byte("-----END X-----"))
	if got, err := ParsePrivateKey(bare); err != nil || !got.Equal(k) {
		t.Fatalf("bare base64: %v", err)
	}
	pub, err := ParsePublicKey(EncodePublicKey(&k.PublicKey), "PUB_KEY_ID_1")
	if err != nil || pub.ID != "PUB_KEY_ID_1" || !pub.Key.Equal(&k.PublicKey) {
		t.Fatalf("public key: %+v %v", pub, err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(0x1DDE55AD98ED71D6), Subject: pkix.Name{CommonName: "paysim"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	cert, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})
	pub, err = ParsePublicKey(certPEM, "")
	if err != nil || pub.ID != "1DDE55AD98ED71D6" {
		t.Fatalf("certificate: %+v %v", pub, err)
	}
	if _, err := ParsePublicKey(certPEM, "1234"); !errors.Is(err, ErrKey) {
		t.Fatalf("certificate under another serial: %v", err)
	}
	if _, err := ParsePrivateKey([]byte("not a key")); !errors.Is(err, ErrKey) {
		t.Fatalf("garbage: %v", err)
	}
}
