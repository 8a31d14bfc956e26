package demo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

type registryOps struct{ r *downstream.Registry }

func (o registryOps) Get(name string) (claim.Operation, bool) {
	op, err := o.r.Get(name)
	return op, err == nil
}

// TestDemoReconChannels_EveryJobReconcilesThroughItsSignedProtocol: the channel accounts `make
// run` sets up reconcile today's payments through each channel's own protocol against paysim —
// WeChat Pay APIv3, Alipay's gateway, Stripe's API, Adyen's report download — and together the
// four bills carry every payment made. A wrong key or setting fails its run with the channel's
// refusal, and imports nothing.
func TestDemoReconChannels_EveryJobReconcilesThroughItsSignedProtocol(t *testing.T) {
	e := start(t, paysim.Config{Seed: 5})
	ctx := context.Background()
	currencies := []string{"CNY", "CNY", "USD", "EUR", "JPY", "CNY"}
	for i, cur := range currencies {
		b := strings.NewReplacer(`"CNY"`, fmt.Sprintf("%q", cur), "ord-1", fmt.Sprintf("ord-recon-%d", i)).Replace(body)
		if r := e.pay(fmt.Sprintf("recon-%d", i), b); r.status != 201 {
			t.Fatalf("payment %d (%s): %+v", i, cur, r)
		}
	}
	keyring, err := reconcile.NewKeyring([]byte("demo-test-secret-0123"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(e.db, reconcile.Config{Store: e.store, Operations: registryOps{e.w.Operations},
		Sources: reconcile.SourcePolicy{Allow: []string{e.w.PaysimURL}}, Keyring: keyring})
	if err != nil {
		t.Fatal(err)
	}
	specs, err := demo.SetUpReconChannels(ctx, e.db, rec, e.w.Paysim, e.w.PaysimURL, []string{demo.OperationCharge},
		&reconcile.FeeSchedule{RateBP: "60", Refunds: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	wantFetcher := map[string]string{"paysim-wechat": reconcile.FetcherWechatPay, "paysim-alipay": reconcile.FetcherAlipay,
		"paysim-stripe": reconcile.FetcherStripe, "paysim-adyen": reconcile.FetcherAdyen}
	if len(specs) != len(wantFetcher) {
		t.Fatalf("%d jobs; want one per channel kind", len(specs))
	}
	var loaded, matched int64
	jobs := map[string]*reconcile.ReconJob{}
	for _, spec := range specs {
		job, err := rec.CreateJob(ctx, spec)
		if err != nil {
			t.Fatalf("job %s: %v", spec.Name, err)
		}
		if job.Fetcher != wantFetcher[spec.Name] {
			t.Errorf("job %s fetches with %q; want %q", spec.Name, job.Fetcher, wantFetcher[spec.Name])
		}
		zone, err := time.LoadLocation(spec.TimeZone)
		if err != nil {
			t.Fatal(err)
		}
		run, err := rec.RunJob(ctx, job, time.Now().In(zone).Format(time.DateOnly), "daemon", nil)
		if err != nil || run.Status != reconcile.RunSucceeded {
			t.Fatalf("job %s: %+v, %v", spec.Name, run, err)
		}
		t.Logf("%s (%s): %d lines loaded, counts %v", spec.Name, job.Fetcher, run.RowsLoaded, run.Counts)
		loaded, matched = loaded+run.RowsLoaded, matched+run.RowsMatched
		jobs[spec.Name] = job
	}
	// Every payment is matched by a line of its account's bill, and by one only.
	if matched != int64(len(currencies)) {
		t.Errorf("the four bills' lines matched %d payments (%d lines loaded); want each of the %d payments once",
			matched, loaded, len(currencies))
	}

	// The same wiring with one thing wrong: each run is refused with the channel's own line.
	keys, err := e.w.Paysim.ProtocolKeys()
	if err != nil {
		t.Fatal(err)
	}
	imported := func() (n int64) {
		e.db.Raw(`SELECT (SELECT count(*) FROM statements) + (SELECT count(*) FROM statement_lines)`).Scan(&n)
		return n
	}
	settings := func(channel string, change func(*reconcile.AccountSettings)) {
		a, err := rec.ChannelAccount(ctx, channel)
		if err != nil {
			t.Fatal(err)
		}
		change(&a.Settings)
		if _, err := rec.SetChannelSettings(ctx, e.db, channel, a.Kind, a.Settings, "demo-test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, channel string
		wrong         func()
		want          string
	}{
		{"a Stripe secret key Stripe does not know", demo.AccountStripe, func() {
			if _, err := rec.SetCredential(ctx, e.db, demo.AccountStripe, reconcile.CredSecretKey,
				reconcile.CredentialInput{Value: "sk_test_demo_not_the_key"}, "demo-test"); err != nil {
				t.Fatal(err)
			}
		}, "Stripe refused the secret key (HTTP 401"},
		{"a WeChat Pay platform key id the answers are not signed with", demo.AccountWechat, func() {
			settings(demo.AccountWechat, func(s *reconcile.AccountSettings) {
				s.PlatformKeys = []reconcile.PlatformKey{{ID: "PUB_KEY_ID_0000000000000000000000000009", PEM: keys.AlipayPublicKey}}
			})
		}, "signed by a key this account does not know"},
		{"an alipay_public_key that is not Alipay's", demo.AccountAlipay, func() {
			settings(demo.AccountAlipay, func(s *reconcile.AccountSettings) { s.AlipayPublicKey = keys.WechatPlatform[0].PEM })
		}, "Alipay's answer signature does not verify"},
		{"another merchant account at Adyen", demo.AccountAdyen, func() {
			settings(demo.AccountAdyen, func(s *reconcile.AccountSettings) { s.MerchantAccount = "NotOurMerchantAccount" })
		}, "Adyen refused the account's credentials (HTTP 403)"},
	} {
		c.wrong()
		before := imported()
		job := jobs[c.channel]
		zone, _ := time.LoadLocation(job.TimeZone)
		run, err := rec.RunJob(ctx, job, time.Now().In(zone).Format(time.DateOnly), "daemon", nil)
		if err == nil || run == nil || run.Status != reconcile.RunFailed || run.Error == nil ||
			!strings.Contains(*run.Error, c.want) || strings.Contains(*run.Error, "\n") || run.StatementID != nil {
			t.Errorf("%s: want a failed run saying %q; got %+v, %v", c.name, c.want, run, err)
		} else {
			t.Logf("%s: %s", c.name, *run.Error)
		}
		if after := imported(); after != before {
			t.Errorf("%s: %d statements and lines imported from a refused fetch", c.name, after-before)
		}
	}
}
