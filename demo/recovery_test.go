package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestDaemon_CrashAfterTheChannelCallEndsCompletedWithOneCharge: a request that crashed between
// the channel call and the local commit is taken over by the daemon's reclaimer, found at the
// channel and completed from the channel's document — with exactly one charge — and its receipt
// goes out once through the outbox relay.
func TestDaemon_CrashAfterTheChannelCallEndsCompletedWithOneCharge(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123"), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: db, Store: store, Paysim: paysim.Config{Seed: 9}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := &env{t: t, w: w, store: store, key: w.APIKey("acme")}
	if r := e.pay("crash-2", body, "X-Demo-Crash", "after-charge"); r.status != 500 {
		t.Fatalf("%+v", r)
	}
	reclaim, err := daemon.NewReclaimJob(store, demo.Ops{W: w}, daemon.ReclaimConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The crashed attempt's lease lapses one TTL after the crash: the reclaimer's turn then.
	pgtest.SleepUntil(t, db, `SELECT lease_expires_at FROM idempotency_keys WHERE state = 'processing'`)
	stats, err := reclaim.RunOnce(ctx, nil, daemon.NopProgress{})
	if err != nil || !stats.Changed() {
		t.Fatalf("the reclaimer did not take the crashed key over: %v, %v", stats, err)
	}
	dk := claim.DownstreamKey("acme", "payment.charge", "crash-2")
	var keyID int64
	db.Raw(`SELECT id FROM idempotency_keys WHERE downstream_key = ?`, dk).Scan(&keyID)
	k, err := store.Get(ctx, keyID)
	if err != nil || k.State != claim.StateCompleted {
		t.Fatalf("key after reclaim: %+v %v (stats %v)", k, err, stats)
	}
	if n := w.Paysim.ChargeCount(dk); n != 1 {
		t.Fatalf("%d charges at paysim", n)
	}
	evs, _ := store.History(ctx, keyID, 0)
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind+"/"+ev.Actor)
	}
	if got := strings.Join(kinds, ","); got != "claimed/service:payments,taken_over/daemon,recovered_from_downstream/daemon" {
		t.Fatalf("history %s", got)
	}
	// The client's retry now gets the recovered payment, replayed.
	if r := e.pay("crash-2", body); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after recovery: %+v", r)
	}

	relay, err := daemon.NewOutboxRelay(db, w.Senders(), daemon.OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := relay.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}
	n, ok := w.Paysim.Notification(claim.DownstreamKey("acme", demo.OperationReceipt, "crash-2"))
	if !ok || n.Deliveries != 1 {
		t.Fatalf("receipt: %+v %v", n, ok)
	}
}
