package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
)

// Account kinds: which fetcher gets a channel account's statements.
const (
	KindGeneric   = "generic" // the job's source: a URL template or a file path
	KindWechatPay = "wechatpay_v3"
	KindAlipay    = "alipay"
	KindStripe    = "stripe"
	KindAdyen     = "adyen"
)

// AccountKinds lists the kinds, generic first.
var AccountKinds = []string{KindGeneric, KindWechatPay, KindAlipay, KindStripe, KindAdyen}

// AccountSettings are what a channel account's fetcher needs that is not secret. Each kind uses
// some of them (SetChannelSettings refuses the others); its secrets are credentials.
type AccountSettings struct {
	// Currencies are the currencies the account's statements settle (ISO 4217; empty: any).
	// Matching uses them for the keys that do not say which account they went through (keys
	// recorded before accounts were): such a key is expected on the statement only in these
	// currencies. Every kind takes it.
	Currencies []string `json:"currencies,omitempty"`

	// APIBase is the channel's API origin (or, for Alipay, the gateway URL; for Adyen the report
	// download base): the kind's production address when empty.
	APIBase string `json:"api_base,omitempty"`

	// WeChat Pay: the merchant id, the keys answers are signed with (platform certificates by
	// serial, or WeChat Pay public keys by ID — two during a rotation), and how long a
	// download_url lives (default 30 s, the shortest the docs state; 5 min in newer ones).
	MchID                  string        `json:"mchid,omitempty"`
	PlatformKeys           []PlatformKey `json:"platform_keys,omitempty"`
	DownloadURLLifeSeconds int           `json:"download_url_life_seconds,omitempty"`

	// Alipay: the application's id and Alipay's public key (PEM, or the bare base64 the key tool
	// shows).
	AppID           string `json:"app_id,omitempty"`
	AlipayPublicKey string `json:"alipay_public_key,omitempty"`

	// Adyen: the merchant account whose settlement details are read, how (api_key: X-API-Key;
	// basic: a report user's name and password), and which batch a bill date is (BatchOrigin:
	// daily batches numbered from a known one).
	MerchantAccount string       `json:"merchant_account,omitempty"`
	Auth            string       `json:"auth,omitempty"`
	BatchOrigin     *BatchOrigin `json:"batch_origin,omitempty"`
}

// PlatformKey is one key WeChat Pay answers may be signed with: ID is the platform
// certificate's serial (upper-case hex) or the public key's ID (PUB_KEY_ID_…), PEM the
// certificate or public key.
type PlatformKey struct {
	ID  string `json:"id"`
	PEM string `json:"pem"`
}

// BatchOrigin numbers Adyen's daily settlement batches: Batch is the batch of Date, and each
// following day is the next batch.
type BatchOrigin struct {
	Batch int64  `json:"batch"`
	Date  string `json:"date"`
}

// Credential names per kind: the secrets each fetcher signs or authenticates with.
const (
	CredMerchantPrivateKey = "merchant_private_key" // WeChat Pay (label: the merchant certificate's serial)
	CredAppPrivateKey      = "app_private_key"      // Alipay
	CredSecretKey          = "secret_key"           // Stripe
	CredAPIKey             = "api_key"              // Adyen, auth api_key
	CredReportUser         = "report_user"          // Adyen, auth basic
	CredReportPassword     = "report_password"      // Adyen, auth basic
)

// kindCredentials lists the credentials each kind takes.
var kindCredentials = map[string][]string{
	KindWechatPay: {CredMerchantPrivateKey},
	KindAlipay:    {CredAppPrivateKey},
	KindStripe:    {CredSecretKey},
	KindAdyen:     {CredAPIKey, CredReportUser, CredReportPassword},
}

// KindCredentials is the credentials a kind takes, in a fixed order (none for generic).
func KindCredentials(kind string) []string { return kindCredentials[kind] }

// The channels' production addresses: the defaults of APIBase, and what the statement-source
// allow-list names unless told otherwise.
const (
	wechatAPI    = "https://api.mch.weixin.qq.com"
	alipayAPI    = "https://openapi.alipay.com/gateway.do"
	stripeAPI    = "https://api.stripe.com"
	adyenReports = "https://ca-live.adyen.com/reports/download"
)

// DefaultSourceAllow are the origins statements may come from by default: each channel's API
// hosts (WeChat Pay's main and backup domain, Alipay's gateway and its bill download host,
// Stripe's API and files, Adyen's live and test customer areas).
var DefaultSourceAllow = []string{
	"https://api.mch.weixin.qq.com", "https://api2.mch.weixin.qq.com",
	"https://openapi.alipay.com", "http://dwbillcenter.alipay.com", "https://dwbillcenter.alipay.com",
	"https://api.stripe.com", "https://files.stripe.com",
	"https://ca-live.adyen.com", "https://ca-test.adyen.com",
}

var (
	mchIDPattern    = regexp.MustCompile(`^[0-9]{6,32}$`)
	appIDPattern    = regexp.MustCompile(`^[0-9]{6,32}$`)
	keyIDPattern    = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)
	merchantPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,80}$`)
)

// ParseAccountSettings reads settings JSON strictly: unknown fields are refused.
func ParseAccountSettings(b []byte) (AccountSettings, error) {
	var s AccountSettings
	if len(bytes.TrimSpace(b)) == 0 {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, invalidf("settings", "%s", errs.Verbatim(strings.TrimPrefix(err.Error(), "json: ")))
	}
	return s, nil
}

// validateSettings checks settings for kind: the fields the kind uses, each well formed, and
// none it does not use. The API base must pass the source policy. Errors: ErrInvalid naming the
// setting.
func (p *sourcePolicy) validateSettings(kind string, s *AccountSettings) error {
	if !slices.Contains(AccountKinds, kind) {
		return invalidf("kind", "%q is not a kind (known: %s)", kind, strings.Join(AccountKinds, ", "))
	}
	uses := map[string]bool{}
	set := func(name string, present bool) {
		if present {
			uses[name] = true
		}
	}
	set("api_base", s.APIBase != "")
	set("mchid", s.MchID != "")
	set("platform_keys", len(s.PlatformKeys) > 0)
	set("download_url_life_seconds", s.DownloadURLLifeSeconds != 0)
	set("app_id", s.AppID != "")
	set("alipay_public_key", s.AlipayPublicKey != "")
	set("merchant_account", s.MerchantAccount != "")
	set("auth", s.Auth != "")
	set("batch_origin", s.BatchOrigin != nil)
	allowed := map[string][]string{
		KindGeneric:   {},
		KindWechatPay: {"api_base", "mchid", "platform_keys", "download_url_life_seconds"},
		KindAlipay:    {"api_base", "app_id", "alipay_public_key"},
		KindStripe:    {"api_base"},
		KindAdyen:     {"api_base", "merchant_account", "auth", "batch_origin"},
	}[kind]
	for name := range uses {
		if !slices.Contains(allowed, name) {
			return invalidf("settings."+name, "a %s account does not use it", kind)
		}
	}
	if s.APIBase != "" {
		if err := p.checkSettingURL(s.APIBase); err != nil {
			return err
		}
	}
	if err := normalizeCurrencies(&s.Currencies); err != nil {
		return err
	}
	switch kind {
	case KindWechatPay:
		if !mchIDPattern.MatchString(s.MchID) {
			return invalidf("settings.mchid", "name the merchant id (digits)")
		}
		if len(s.PlatformKeys) == 0 || len(s.PlatformKeys) > 4 {
			return invalidf("settings.platform_keys", "give 1 to 4 platform certificates or WeChat Pay public keys (two during a rotation)")
		}
		for i := range s.PlatformKeys {
			pk := &s.PlatformKeys[i]
			k, err := chanproto.ParsePublicKey([]byte(pk.PEM), pk.ID)
			if err != nil {
				return invalidf("settings.platform_keys", "key %d: %s", i+1, errs.Verbatim(err.Error()))
			}
			if pk.ID = k.ID; !keyIDPattern.MatchString(pk.ID) {
				return invalidf("settings.platform_keys", "key %d: name it by its serial or its ID (PUB_KEY_ID_…)", i+1)
			}
		}
		if s.DownloadURLLifeSeconds < 0 || s.DownloadURLLifeSeconds > 3600 {
			return invalidf("settings.download_url_life_seconds", "%d is outside 0..3600", s.DownloadURLLifeSeconds)
		}
	case KindAlipay:
		if !appIDPattern.MatchString(s.AppID) {
			return invalidf("settings.app_id", "name the application's id (digits)")
		}
		if _, err := chanproto.ParsePublicKey([]byte(s.AlipayPublicKey), ""); err != nil {
			return invalidf("settings.alipay_public_key", "%s", errs.Verbatim(err.Error()))
		}
	case KindAdyen:
		if !merchantPattern.MatchString(s.MerchantAccount) {
			return invalidf("settings.merchant_account", "name the merchant account")
		}
		if s.Auth != "api_key" && s.Auth != "basic" {
			return invalidf("settings.auth", "api_key (X-API-Key) or basic (a report user's name and password)")
		}
		if s.BatchOrigin == nil {
			return invalidf("settings.batch_origin", "give the batch number of one date: {\"batch\": N, \"date\": \"YYYY-MM-DD\"}")
		}
		if _, err := time.Parse(time.DateOnly, s.BatchOrigin.Date); err != nil || s.BatchOrigin.Batch < 0 {
			return invalidf("settings.batch_origin", "a batch number of 0 or more and a date YYYY-MM-DD")
		}
	}
	return nil
}

// checkSettingURL checks an API base is an http(s) URL whose origin the source policy allows.
func (p *sourcePolicy) checkSettingURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.RawQuery != "" {
		return invalidf("settings.api_base", "%q is not an http(s) URL without user or query", truncateName(raw))
	}
	if err := p.allowURL(u); err != nil {
		return invalidWhy("settings.api_base", phraseOf(err))
	}
	return nil
}

// apiBase is the account's API base, or the kind's production one.
func (s AccountSettings) apiBase(kind string) string {
	if s.APIBase != "" {
		return strings.TrimSuffix(s.APIBase, "/")
	}
	return map[string]string{KindWechatPay: wechatAPI, KindAlipay: alipayAPI, KindStripe: stripeAPI, KindAdyen: adyenReports}[kind]
}

// wechatKeys are the platform keys answers may be signed with.
func (s AccountSettings) wechatKeys() (chanproto.WechatKeys, error) {
	keys := chanproto.WechatKeys{}
	for _, pk := range s.PlatformKeys {
		k, err := chanproto.ParsePublicKey([]byte(pk.PEM), pk.ID)
		if err != nil {
			return nil, fmt.Errorf("platform key %s: %w", pk.ID, err)
		}
		keys[k.ID] = k.Key
	}
	return keys, nil
}

// normalizeCurrencies upper-cases, checks (money's table), sorts and dedupes an account's
// currencies: at most 50. Errors: ErrInvalid naming settings.currencies.
func normalizeCurrencies(cs *[]string) error {
	var out []string
	for _, c := range *cs {
		c = strings.ToUpper(strings.TrimSpace(c))
		if !money.Known(c) {
			return invalidf("settings.currencies", "%q is not an ISO 4217 currency", truncateName(c))
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if len(out) > 50 {
		return invalidf("settings.currencies", "at most 50 currencies")
	}
	slices.Sort(out)
	*cs = out
	return nil
}
