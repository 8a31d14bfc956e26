package demo

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

// The demo reconciles through the channels' own protocols, against paysim: one channel account
// per kind, each with its own credentials — a merchant key registered at paysim's WeChat Pay,
// an application key at its Alipay gateway, a Stripe secret key, an Adyen API key — and paysim's
// public keys in its settings. Keys are made afresh at every start (paysim's are too); the
// credentials are saved sealed, as an administrator would save them.

// The demo's channel accounts, one per paysim channel.
const (
	AccountWechat = "paysim-wechat"
	AccountAlipay = "paysim-alipay"
	AccountStripe = "paysim-stripe"
	AccountAdyen  = "paysim-adyen"
)

// ChannelRoutes are where the demo's payments service charges, by currency, as a merchant's
// payment page offers wallets: CNY through WeChat Pay or Alipay (the customer's pick, here the
// order's downstream key), USD and JPY through Stripe, every other currency through Adyen. The
// charge is made at that paysim channel and the key records the account, and paysim lists each
// charge on its own channel's statements only: so each account's statement meets exactly the
// charges made through it, and steady traffic makes no finding.
var ChannelRoutes = &downstream.ChannelRoutes{
	ByCurrency: map[string][]downstream.ChannelRoute{
		"CNY": {{Account: AccountWechat, Channel: "wechat"}, {Account: AccountAlipay, Channel: "alipay"}},
		"USD": {{Account: AccountStripe, Channel: "stripe"}},
		"JPY": {{Account: AccountStripe, Channel: "stripe"}},
	},
	Default: []downstream.ChannelRoute{{Account: AccountAdyen, Channel: "adyen"}},
}

// accountCurrencies are the currencies each account settles (its statements' currency set):
// what matching expects there of keys that do not say which account they went through.
var accountCurrencies = map[string][]string{AccountWechat: {"CNY"}, AccountAlipay: {"CNY"}, AccountStripe: {"JPY", "USD"}}

// demoMerchantSerial is the serial the demo's WeChat Pay merchant key is registered under.
const demoMerchantSerial = "444F4D4F4D45524348414E5430303031"

// SetUpReconChannels configures the demo's channel accounts against sim (reachable at
// paysimURL, which the reconciler's allow-list must name) and returns the recon jobs to create:
// WeChat Pay's trade bill, Alipay's trade bill, Stripe's balance transactions and Adyen's
// settlement details, each reconciling today's bill every minute.
func SetUpReconChannels(ctx context.Context, db *gorm.DB, rec *reconcile.Reconciler, sim *paysim.Server, paysimURL string,
	operations []string, fees *reconcile.FeeSchedule) ([]reconcile.JobSpec, error) {
	if sim == nil {
		return nil, errors.New("demo: the channel accounts need paysim in this process")
	}
	keys, err := sim.ProtocolKeys()
	if err != nil {
		return nil, err
	}
	merchant, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	app, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	stripeKey, adyenKey := "sk_test_demo_"+randomHex(12), "AQE-demo-"+randomHex(12)
	if err := sim.AddMerchant(paysim.Merchant{WechatSerial: demoMerchantSerial, WechatPublicKey: string(chanproto.EncodePublicKey(&merchant.PublicKey)),
		AlipayAppID: "2021000100000001", AlipayPublicKey: string(chanproto.EncodePublicKey(&app.PublicKey)),
		StripeSecretKey: stripeKey, AdyenAPIKey: adyenKey}); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(paysimURL, "/")
	var platform []reconcile.PlatformKey
	for _, k := range keys.WechatPlatform {
		platform = append(platform, reconcile.PlatformKey{ID: k.ID, PEM: k.PEM})
	}
	accounts := []struct {
		channel, kind string
		settings      reconcile.AccountSettings
		creds         map[string]reconcile.CredentialInput
	}{
		{AccountWechat, reconcile.KindWechatPay, reconcile.AccountSettings{APIBase: base, MchID: keys.WechatMchID, PlatformKeys: platform},
			map[string]reconcile.CredentialInput{reconcile.CredMerchantPrivateKey: {Value: string(chanproto.EncodePrivateKey(merchant)), Label: demoMerchantSerial}}},
		{AccountAlipay, reconcile.KindAlipay, reconcile.AccountSettings{APIBase: base + "/gateway.do", AppID: "2021000100000001",
			AlipayPublicKey: keys.AlipayPublicKey},
			map[string]reconcile.CredentialInput{reconcile.CredAppPrivateKey: {Value: string(chanproto.EncodePrivateKey(app))}}},
		{AccountStripe, reconcile.KindStripe, reconcile.AccountSettings{APIBase: base},
			map[string]reconcile.CredentialInput{reconcile.CredSecretKey: {Value: stripeKey}}},
		{AccountAdyen, reconcile.KindAdyen, reconcile.AccountSettings{APIBase: base + "/reports/download", MerchantAccount: keys.AdyenMerchant,
			Auth: "api_key", BatchOrigin: &reconcile.BatchOrigin{Batch: 0, Date: "1970-01-01"}},
			map[string]reconcile.CredentialInput{reconcile.CredAPIKey: {Value: adyenKey}}},
	}
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, a := range accounts {
			a.settings.Currencies = accountCurrencies[a.channel]
			if _, err := rec.SetChannelSettings(ctx, tx, a.channel, a.kind, a.settings, "demo"); err != nil {
				return fmt.Errorf("channel account %s: %w", a.channel, err)
			}
			for name, in := range a.creds {
				if _, err := rec.SetCredential(ctx, tx, a.channel, name, in, "demo"); err != nil {
					return fmt.Errorf("channel account %s: %w", a.channel, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	job := func(name, channel, format, zone string) reconcile.JobSpec {
		return reconcile.JobSpec{Name: name, Channel: channel, Format: format, Operations: operations, CronSpec: "@every 1m",
			TimeZone: zone, Enabled: true, GraceSeconds: 300, ReadyDeadlineSeconds: 60, FeeSchedule: fees}
	}
	return []reconcile.JobSpec{
		job(AccountWechat, AccountWechat, "wechat", "Asia/Shanghai"),
		job(AccountAlipay, AccountAlipay, "alipay", "Asia/Shanghai"),
		job(AccountStripe, AccountStripe, "stripe", "UTC"),
		job(AccountAdyen, AccountAdyen, "adyen", "UTC"),
	}, nil
}
