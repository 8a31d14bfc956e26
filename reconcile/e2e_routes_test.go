package reconcile_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/clock"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// TestE2E_DemoRoutesEachChargeToOneAccountSteadyTrafficMakesNoFinding: the demo service charges
// each payment through one channel account (by currency) and its key records that account;
// each account's statement, fetched through the channel's own protocol as `idemops demo` does,
// is matched against that account's keys only. Payments in every currency — retried, dropped
// and answered again — make no finding on any of the four accounts; a crash between the
// channel's charge and the local commit makes exactly one, CHANNEL_ONLY on the account the
// charge went through, and none once the key is taken over. (Before accounts were recorded,
// each non-CNY payment was LOCAL_ONLY on both CNY-only bills.)
func TestE2E_DemoRoutesEachChargeToOneAccountSteadyTrafficMakesNoFinding(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	t.Parallel()
	waitPastMidnight(t)
	clock.AvoidMidnight(t, time.UTC, 30*time.Second) // Stripe's and Adyen's days are UTC days
	ctx := context.Background()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("e2e-test-secret-0123456"), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: db, Store: store, Paysim: paysim.Config{Seed: 62}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	audit := &recordingAuditor{}
	rec, err := reconcile.New(db, reconcile.Config{Store: store, Operations: demo.Ops{W: w}, Auditor: audit,
		ProgressInterval: time.Millisecond, Sources: reconcile.SourcePolicy{Allow: []string{w.PaysimURL}}, Keyring: testKeyring})
	if err != nil {
		t.Fatal(err)
	}
	specs, err := demo.SetUpReconChannels(ctx, db, rec, w.Paysim, w.PaysimURL, []string{demo.OperationCharge}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*reconcile.ReconJob
	for _, spec := range specs {
		j, err := rec.CreateJob(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	e := &e2e{t: t, ctx: ctx, db: db, store: store, w: w, rec: rec, audit: audit}

	// Two CNY payments on each of WeChat Pay and Alipay (the route is the downstream key's), and
	// one in each other currency of the demo's traffic; one CNY payment's answer is dropped and
	// its retry answered, one is sent twice.
	routed := map[string]int{}
	var cny []string
	for i := 0; len(cny) < 4 && i < 200; i++ {
		key := fmt.Sprintf("cny-%d", i)
		rt, _ := demo.ChannelRoutes.For("CNY", dk(key))
		if routed[rt.Account] < 2 {
			routed[rt.Account]++
			cny = append(cny, key)
		}
	}
	if len(cny) != 4 {
		t.Fatalf("no two CNY keys for each CNY account: %v", routed)
	}
	status := func(key string, want, got int) {
		t.Helper()
		if got != want {
			t.Fatalf("payment %s: status %d, want %d", key, got, want)
		}
	}
	for i, key := range cny {
		status(key, 201, e.pay(key, int64(1000+i), "CNY", "alice"))
	}
	status(cny[0], 201, e.pay(cny[0], 1000, "CNY", "alice")) // a retry: replayed
	status("drop-1", 503, e.pay("drop-1", 2000, "CNY", "bob", paysim.HeaderFault, "drop-response"))
	status("drop-1", 201, e.pay("drop-1", 2000, "CNY", "bob"))
	currencies := map[string]string{"usd-1": "USD", "jpy-1": "JPY", "idr-1": "IDR", "bhd-1": "BHD"}
	for key, cur := range currencies {
		status(key, 201, e.pay(key, 3000, cur, "carol"))
	}
	// Every completed key says where its charge went: where the routes send it.
	var keys []struct {
		DownstreamKey  string
		Currency       string
		ChannelAccount *string
	}
	if err := db.Raw(`SELECT downstream_key, currency, channel_account FROM idempotency_keys WHERE state = 'completed'`).
		Scan(&keys).Error; err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(cny)+1+len(currencies) {
		t.Fatalf("%d completed keys, want %d", len(keys), len(cny)+1+len(currencies))
	}
	for _, k := range keys {
		rt, _ := demo.ChannelRoutes.For(k.Currency, k.DownstreamKey)
		if k.ChannelAccount == nil || *k.ChannelAccount != rt.Account {
			t.Errorf("key %s… (%s) records account %v, want %s", k.DownstreamKey[:8], k.Currency, k.ChannelAccount, rt.Account)
		}
	}

	runAll := func(when string) map[string]int64 {
		t.Helper()
		lines := map[string]int64{}
		for _, j := range jobs {
			run, err := rec.RunJob(ctx, j, "", "operator:e2e", nil)
			if err != nil || run.Status != reconcile.RunSucceeded {
				t.Fatalf("%s: run of %s: %+v %v", when, j.Name, run, err)
			}
			if run.KeysWithoutAccount != 0 {
				t.Errorf("%s: run of %s: %d findings about keys without an account", when, j.Name, run.KeysWithoutAccount)
			}
			lines[j.Channel] = run.RowsMatched
		}
		return lines
	}
	openFindings := func() []string {
		t.Helper()
		fs, err := rec.ListFindings(ctx, reconcile.FindingFilter{State: reconcile.FindingOpen})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %s %s", f.Channel, f.Kind, f.Subject))
		}
		sort.Strings(out)
		return out
	}
	matched := runAll("steady traffic")
	if got := openFindings(); len(got) != 0 {
		t.Fatalf("steady traffic: open findings %q; want none", got)
	}
	want := map[string]int64{demo.AccountWechat: 3, demo.AccountAlipay: 2, demo.AccountStripe: 2, demo.AccountAdyen: 2}
	if rt, _ := demo.ChannelRoutes.For("CNY", dk("drop-1")); rt.Account == demo.AccountAlipay {
		want[demo.AccountWechat], want[demo.AccountAlipay] = 2, 3
	}
	for account, n := range want {
		if matched[account] != n {
			t.Errorf("%s's statement: %d lines matched, want %d (its own charges): %v", account, matched[account], n, matched)
		}
	}

	// A crash after the channel charged: the charge is on its account's statement, the key is
	// processing — one CHANNEL_ONLY there, nothing anywhere else.
	status("crash-1", 500, e.pay("crash-1", 4000, "CNY", "dave", "X-Demo-Crash", "after-charge"))
	crashAccount, _ := demo.ChannelRoutes.For("CNY", dk("crash-1"))
	runAll("after the crash")
	wantOpen := []string{fmt.Sprintf("%s CHANNEL_ONLY key:%d", crashAccount.Account, e.keyID("crash-1"))}
	if got := openFindings(); fmt.Sprint(got) != fmt.Sprint(wantOpen) {
		t.Fatalf("after the crash: open findings %q; want %q", got, wantOpen)
	}
	// Taken over (the daemon's path: look the charge up, complete from it): the next runs close it.
	pgtest.SleepUntil(t, db, `SELECT lease_expires_at FROM idempotency_keys WHERE id = ?`, e.keyID("crash-1"))
	lease, err := store.Takeover(ctx, e.keyID("crash-1"), "daemon")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := store.Drive(ctx, w.Charge, lease, claim.DriveOptions{}); err != nil || out.Kind != claim.Recovered {
		t.Fatalf("takeover of the crashed key: %+v %v", out, err)
	}
	runAll("after the takeover")
	if got := openFindings(); len(got) != 0 {
		t.Fatalf("after the takeover: open findings %q; want none", got)
	}
	if k, err := store.Get(ctx, e.keyID("crash-1")); err != nil || k.ChannelAccount == nil || *k.ChannelAccount != crashAccount.Account {
		t.Fatalf("the recovered key's account: %+v %v; want %s (from the lookup)", k, err, crashAccount.Account)
	}
}
