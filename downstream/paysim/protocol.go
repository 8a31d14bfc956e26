package paysim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemops/idemops/chanproto"
)

// The channels' statement protocols as paysim speaks them (issue 34): WeChat Pay APIv3's bill
// queries and downloads, Alipay's gateway method alipay.data.dataservice.bill.downloadurl.query
// and its bill download, Stripe's payouts and balance transactions, Adyen's settlement details
// report download. paysim checks a merchant's request as the channel does (signatures with the
// merchant's registered public key, API keys, report users) and answers a refused one with the
// channel's own refusal; it signs its answers with its own keys (a WeChat Pay platform
// certificate — or a WeChat Pay public key — and an Alipay key), serves download URLs that
// expire, SHA1 hashes, encrypted and split bills, and bills that are not ready before 10:00 the
// next day when asked to be strict.

// Bill readiness: when a date's WeChat Pay and Alipay bills can be had.
const (
	// ReadyAnytime serves a date's bill at any time, as it stands (the demo's default: today's
	// bill while today's traffic runs).
	ReadyAnytime = "anytime"
	// ReadyNextDay10 serves a date's bill from 10:00 Asia/Shanghai the next day, as the
	// channels do; before it WeChat Pay answers STATEMENT_CREATING and Alipay isp.bill_not_exist.
	ReadyNextDay10 = "next-day-10:00"
)

// WeChat Pay bill answers: how the bill query answers.
const (
	// WechatBillPlain answers {hash_type, hash_value, download_url}.
	WechatBillPlain = "plain"
	// WechatBillEncrypted answers download_bill_list with one AEAD_AES_256_GCM part.
	WechatBillEncrypted = "encrypted"
	// WechatBillSplit answers download_bill_list with WechatBillParts encrypted parts.
	WechatBillSplit = "split"
)

// Merchant is a merchant's credentials as the channel knows them: its WeChat Pay merchant
// certificate's public key (by serial), its Alipay application's public key, its Stripe secret
// key, its Adyen API key and report user.
type Merchant struct {
	WechatSerial        string `json:"wechat_serial,omitempty"`
	WechatPublicKey     string `json:"wechat_public_key,omitempty"` // PEM (certificate or public key)
	AlipayAppID         string `json:"alipay_app_id,omitempty"`
	AlipayPublicKey     string `json:"alipay_public_key,omitempty"` // PEM
	StripeSecretKey     string `json:"stripe_secret_key,omitempty"`
	AdyenAPIKey         string `json:"adyen_api_key,omitempty"`
	AdyenReportUser     string `json:"adyen_report_user,omitempty"`
	AdyenReportPassword string `json:"adyen_report_password,omitempty"`
}

// ProtocolKeys are what a merchant configures to talk to paysim: the ids paysim answers for and
// the public keys its answers are signed with.
type ProtocolKeys struct {
	WechatMchID string `json:"wechat_mchid"`
	// WechatPlatform are the keys WeChat Pay answers may be signed with, newest first (two
	// after a rotation): {id, pem}.
	WechatPlatform  []ProtocolKey `json:"wechat_platform"`
	AlipayPublicKey string        `json:"alipay_public_key"`
	AdyenMerchant   string        `json:"adyen_merchant_account"`
}

// ProtocolKey is one public key by the id answers name it with.
type ProtocolKey struct {
	ID  string `json:"id"`
	PEM string `json:"pem"`
}

// protocol is paysim's side of the statement protocols.
type protocol struct {
	mu        sync.Mutex
	platform  []signingKey // WeChat Pay: newest first; [0] signs
	alipayKey *rsa.PrivateKey
	merchants []merchantKeys
	tokens    map[string]download
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
	pem string // the certificate (or public key) merchants verify with
}

type merchantKeys struct {
	Merchant
	wechat *rsa.PublicKey
	alipay *rsa.PublicKey
}

// download is a bill behind an expiring download URL.
type download struct {
	body    []byte
	expires time.Time
	kind    string // "wechat" (a signed GET) or "alipay"
}

// maxDownloads bounds the live download URLs; the oldest go first.
const maxDownloads = 1024

// platformKeys returns the platform signing keys, making the first on first use (a 2048-bit
// key takes a moment; most simulations never sign).
func (s *Server) platformKeys() ([]signingKey, error) {
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.platform) == 0 {
		k, err := s.newPlatformKey(s.cfg.WechatPlatformKey)
		if err != nil {
			return nil, err
		}
		p.platform = []signingKey{k}
	}
	return append([]signingKey(nil), p.platform...), nil
}

func (s *Server) newPlatformKey(k *rsa.PrivateKey) (signingKey, error) {
	if k == nil {
		var err error
		if k, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return signingKey{}, err
		}
	}
	if s.cfg.WechatPublicKeyMode {
		raw := make([]byte, 12)
		_, _ = rand.Read(raw)
		return signingKey{id: chanproto.WechatPublicKeyIDPrefix + strings.ToUpper(hex.EncodeToString(raw)), key: k,
			pem: string(chanproto.EncodePublicKey(&k.PublicKey))}, nil
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 159))
	now := s.cfg.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "Tenpay.com Root CA (paysim)", Organization: []string{"paysim"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(5, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return signingKey{}, err
	}
	return signingKey{id: strings.ToUpper(serial.Text(16)), key: k,
		pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}, nil
}

// RotateWechatPlatformKey makes a new platform key the one answers are signed with; the
// previous one stays listed (ProtocolKeys) until the next rotation, as WeChat Pay keeps both
// certificates valid during a switch.
func (s *Server) RotateWechatPlatformKey() error {
	if _, err := s.platformKeys(); err != nil {
		return err
	}
	k, err := s.newPlatformKey(nil)
	if err != nil {
		return err
	}
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	p.platform = []signingKey{k, p.platform[0]}
	return nil
}

func (s *Server) alipaySigningKey() (*rsa.PrivateKey, error) {
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alipayKey == nil && s.cfg.AlipayKey != nil {
		p.alipayKey = s.cfg.AlipayKey
	}
	if p.alipayKey == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		p.alipayKey = k
	}
	return p.alipayKey, nil
}

// ProtocolKeys returns what a merchant configures to verify paysim's answers.
func (s *Server) ProtocolKeys() (ProtocolKeys, error) {
	platform, err := s.platformKeys()
	if err != nil {
		return ProtocolKeys{}, err
	}
	ak, err := s.alipaySigningKey()
	if err != nil {
		return ProtocolKeys{}, err
	}
	out := ProtocolKeys{WechatMchID: s.cfg.WechatMchID, AlipayPublicKey: string(chanproto.EncodePublicKey(&ak.PublicKey)),
		AdyenMerchant: s.cfg.AdyenMerchant}
	for _, k := range platform {
		out.WechatPlatform = append(out.WechatPlatform, ProtocolKey{ID: k.id, PEM: k.pem})
	}
	return out, nil
}

// ErrMerchant: merchant credentials that do not parse.
var ErrMerchant = errors.New("invalid merchant credentials")

// AddMerchant registers a merchant's credentials (several merchants, or one merchant's old and
// new keys during a rotation, may be registered at once).
func (s *Server) AddMerchant(m Merchant) error {
	mk := merchantKeys{Merchant: m}
	if m.WechatPublicKey != "" {
		k, err := chanproto.ParsePublicKey([]byte(m.WechatPublicKey), "")
		if err != nil || m.WechatSerial == "" {
			return fmt.Errorf("%w: wechat_public_key and wechat_serial", ErrMerchant)
		}
		mk.wechat = k.Key
	}
	if m.AlipayPublicKey != "" {
		k, err := chanproto.ParsePublicKey([]byte(m.AlipayPublicKey), "")
		if err != nil || m.AlipayAppID == "" {
			return fmt.Errorf("%w: alipay_public_key and alipay_app_id", ErrMerchant)
		}
		mk.alipay = k.Key
	}
	if (m.AdyenReportUser == "") != (m.AdyenReportPassword == "") {
		return fmt.Errorf("%w: adyen_report_user needs adyen_report_password", ErrMerchant)
	}
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.merchants) >= 64 {
		return fmt.Errorf("%w: at most 64 merchants", ErrMerchant)
	}
	p.merchants = append(p.merchants, mk)
	return nil
}

// findMerchant returns the first merchant that match accepts.
func (s *Server) findMerchant(match func(merchantKeys) bool) (merchantKeys, bool) {
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.merchants {
		if match(m) {
			return m, true
		}
	}
	return merchantKeys{}, false
}

// offerDownload keeps body behind a new token for life.
func (s *Server) offerDownload(kind string, body []byte, life time.Duration) string {
	raw := make([]byte, 18)
	_, _ = rand.Read(raw)
	token := hex.EncodeToString(raw)
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tokens == nil {
		p.tokens = map[string]download{}
	}
	now := s.cfg.Now()
	for t, d := range p.tokens {
		if now.After(d.expires) {
			delete(p.tokens, t)
		}
	}
	for len(p.tokens) >= maxDownloads {
		var oldest string
		for t, d := range p.tokens {
			if oldest == "" || d.expires.Before(p.tokens[oldest].expires) {
				oldest = t
			}
		}
		delete(p.tokens, oldest)
	}
	p.tokens[token] = download{body: body, expires: now.Add(life), kind: kind}
	return token
}

// takeDownload returns the bill behind token when it has not expired.
func (s *Server) takeDownload(kind, token string) ([]byte, bool) {
	p := &s.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.tokens[token]
	if !ok || d.kind != kind || s.cfg.Now().After(d.expires) {
		return nil, false
	}
	return d.body, true
}

// billReady says whether the bill of date (a day in Shanghai) can be had now.
func (s *Server) billReady(date time.Time) bool {
	if s.cfg.BillReady != ReadyNextDay10 {
		return true
	}
	return !s.cfg.Now().Before(date.AddDate(0, 0, 1).Add(10 * time.Hour))
}

// baseURL is the address the request came to, for the download URLs paysim answers.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// getProtocol handles GET /_paysim/protocol: ProtocolKeys.
func (s *Server) getProtocol(w http.ResponseWriter, _ *http.Request) {
	k, err := s.ProtocolKeys()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, k)
}

// postMerchant handles POST /_paysim/protocol/merchants: AddMerchant.
func (s *Server) postMerchant(w http.ResponseWriter, r *http.Request) {
	var m Merchant
	if err := decodeBody(w, r, &m); err != nil {
		writeError(w, bodyStatus(err), "invalid_request", err.Error())
		return
	}
	if err := s.AddMerchant(m); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"status": "registered"})
}

// postRotate handles POST /_paysim/protocol/rotate: RotateWechatPlatformKey.
func (s *Server) postRotate(w http.ResponseWriter, _ *http.Request) {
	if err := s.RotateWechatPlatformKey(); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	k, _ := s.ProtocolKeys()
	writeJSON(w, http.StatusOK, k)
}
