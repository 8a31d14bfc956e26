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
// four bills carry every payment made. A wrong signature, key or setting fails its run.
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
	var loaded int64
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
		loaded += run.RowsLoaded
	}
	if loaded < int64(len(currencies)) {
		t.Errorf("the four bills carry %d lines; want every one of the %d payments", loaded, len(currencies))
	}
}
