package downstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// paysimWorld is a claim store on a fresh database and an in-process paysim on 127.0.0.1.
type paysimWorld struct {
	store *claim.Store
	op    *downstream.PaysimCharge
	sim   *paysim.Server
}

func newPaysimWorld(t *testing.T, cfg paysim.Config) *paysimWorld {
	t.Helper()
	store, err := claim.NewStore(pgtest.New(t), claim.Config{DigestSecret: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { ts.Close(); sim.Close() })
	return &paysimWorld{store: store, op: downstream.NewPaysimCharge(paysim.NewClient(ts.URL, ts.Client())), sim: sim}
}

func payment(amount int64, payee string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"amount_minor": amount, "currency": "CNY", "merchant_order_no": "M-1",
		"payee": payee, "description": "tea", "client_ts": "2024-03-15T10:00:00Z"})
	return b
}

func TestPaysimCharge_FiftyConcurrentRunsOnOneKeyChargeOnce(t *testing.T) {
	t.Parallel()
	w := newPaysimWorld(t, paysim.Config{})
	req := claim.Request{Tenant: "tenant-a", Key: "pay-1", Intent: payment(1999, "alice")}
	var wg sync.WaitGroup
	kinds := make([]claim.Kind, 50)
	for i := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := w.store.Run(context.Background(), w.op, req)
			if err != nil {
				t.Error(err)
				return
			}
			kinds[i] = out.Kind
		}()
	}
	wg.Wait()
	completed := 0
	for _, k := range kinds {
		switch k {
		case claim.Completed:
			completed++
		case claim.InProgress, claim.Replay:
		default:
			t.Errorf("unexpected outcome %s", k)
		}
	}
	if completed != 1 {
		t.Fatalf("completed runs = %d, want 1 (kinds %v)", completed, kinds)
	}
	dkey := claim.DownstreamKey("tenant-a", downstream.PaymentCharge, "pay-1")
	if n := w.sim.ChargeCount(dkey); n != 1 {
		t.Fatalf("charges at paysim = %d, want exactly 1", n)
	}
	replay, err := w.store.Run(context.Background(), w.op, req)
	if err != nil || replay.Kind != claim.Replay || replay.Snapshot.Status != 201 {
		t.Fatalf("later run = %+v, %v; want a replay of the 201", replay, err)
	}
}

func TestPaysimCharge_DescriptionAndClientClockCarryNoIntent(t *testing.T) {
	t.Parallel()
	w := newPaysimWorld(t, paysim.Config{})
	ctx := context.Background()
	first, err := w.store.Run(ctx, w.op, claim.Request{Tenant: "t", Key: "k", Intent: payment(500, "bob")})
	if err != nil || first.Kind != claim.Completed {
		t.Fatalf("first = %+v, %v", first, err)
	}
	b, _ := json.Marshal(map[string]any{"amount_minor": 500, "currency": "CNY", "merchant_order_no": "M-1",
		"payee": "bob", "description": "other words", "client_ts": "later"})
	again, err := w.store.Run(ctx, w.op, claim.Request{Tenant: "t", Key: "k", Intent: b})
	if err != nil || again.Kind != claim.Replay {
		t.Fatalf("same intent, other description: %+v, %v; want a replay", again, err)
	}
	other, err := w.store.Run(ctx, w.op, claim.Request{Tenant: "t", Key: "k", Intent: payment(501, "bob")})
	if err != nil || other.Kind != claim.Mismatch {
		t.Fatalf("other amount: %+v, %v; want a mismatch", other, err)
	}
}

func TestPaysimCharge_DroppedResponseIsRecoveredByLookupNotChargedAgain(t *testing.T) {
	t.Parallel()
	// Every write commits and then loses its answer; lookups still answer.
	w := newPaysimWorld(t, paysim.Config{DropResponseRate: 1})
	ctx := context.Background()
	req := claim.Request{Tenant: "t", Key: "k-drop", Intent: payment(700, "carol")}
	first, err := w.store.Run(ctx, w.op, req)
	if err != nil || first.Kind != claim.Failed || first.State != claim.StateFailedRetryable {
		t.Fatalf("first = %+v, %v; want failed_retryable (the outcome is unknown)", first, err)
	}
	second, err := w.store.Run(ctx, w.op, req)
	if err != nil || second.Kind != claim.Recovered || second.State != claim.StateCompleted {
		t.Fatalf("retry = %+v, %v; want recovered from the lookup", second, err)
	}
	dkey := claim.DownstreamKey("t", downstream.PaymentCharge, "k-drop")
	ch, err := paysimLookup(w, dkey)
	if err != nil || second.ResourceID != ch.ID {
		t.Fatalf("resource %q, paysim charge %+v, %v", second.ResourceID, ch, err)
	}
	if n := w.sim.ChargeCount(dkey); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func paysimLookup(w *paysimWorld, dkey string) (*paysim.Charge, error) {
	doc, err := w.op.Lookup(context.Background(), &claim.Lease{DownstreamKey: dkey})
	if err != nil || doc == nil {
		return nil, errors.Join(err, errors.New("not found"))
	}
	return downstream.ChargeOf(doc)
}

func TestPaysimCharge_DeclinedChargeFailsFinalAndIsReplayed(t *testing.T) {
	t.Parallel()
	w := newPaysimWorld(t, paysim.Config{DeclinePayees: []string{"blocked"}})
	ctx := context.Background()
	req := claim.Request{Tenant: "t", Key: "k-declined", Intent: payment(300, "blocked")}
	first, err := w.store.Run(ctx, w.op, req)
	if err != nil || first.Kind != claim.Failed || first.State != claim.StateFailedFinal {
		t.Fatalf("first = %+v, %v; want failed_final", first, err)
	}
	if first.Failure.Code != "declined" || first.Snapshot == nil || first.Snapshot.Status != 402 {
		t.Fatalf("failure = %+v, snapshot %+v", first.Failure, first.Snapshot)
	}
	again, err := w.store.Run(ctx, w.op, req)
	if err != nil || again.Kind != claim.Replay || again.Failure == nil || again.Snapshot.Status != 402 {
		t.Fatalf("replay = %+v, %v", again, err)
	}
	if n := w.sim.ChargeCount(claim.DownstreamKey("t", downstream.PaymentCharge, "k-declined")); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestPaysimCharge_LookupSortsAnswers(t *testing.T) {
	t.Parallel()
	op := func(cfg paysim.Config) *downstream.PaysimCharge {
		sim, err := paysim.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(sim)
		t.Cleanup(func() { ts.Close(); sim.Close() })
		return downstream.NewPaysimCharge(paysim.NewClient(ts.URL, ts.Client()))
	}
	if doc, err := op(paysim.Config{}).Lookup(context.Background(), &claim.Lease{DownstreamKey: "nothing-here"}); doc != nil || err != nil {
		t.Fatalf("404: %+v, %v; want (nil, nil)", doc, err)
	}
	down := op(paysim.Config{ErrorRate: 1})
	if _, err := down.Lookup(context.Background(), &claim.Lease{DownstreamKey: "x"}); !errors.Is(err, paysim.ErrUnavailable) {
		t.Fatalf("5xx: %v; want an error wrapping ErrUnavailable", err)
	}
}
