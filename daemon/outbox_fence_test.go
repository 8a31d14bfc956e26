package daemon_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestOutbox_AFencedTenantsRowsWaitAndTheOthersAreSent: while a tenant is fenced for a move
// between cells, the relay leaves its rows (the move carries them to its new cell, whose relay
// sends them; the fence would refuse the claim's update and fail the whole batch) and sends
// every other tenant's.
func TestOutbox_AFencedTenantsRowsWaitAndTheOthersAreSent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("outbox-fence-secret-0123")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "initech"} {
		out, err := store.Claim(ctx, claim.Request{Tenant: tenant, Operation: "charge", Key: "k", Intent: []byte(`{"amount":1}`), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("claim %s: %v %v", tenant, out, err)
		}
		if err := claim.Enqueue(ctx, db, claim.OutboxMessage{KeyID: out.KeyID, Operation: notifyOp, DownstreamKey: tenant,
			Payload: json.RawMessage(`{"event":"shipped"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Exec(t, db, `INSERT INTO cell_fences (tenant, state, sealed) VALUES ('acme', 'frozen', true)`)
	down := newDownstream(false)
	r := newRelay(t, db, down, nil)
	stats, err := r.RunOnce(ctx, nil, daemon.NopProgress{})
	if err != nil || stats["claimed"] != 1 || stats["sent"] != 1 {
		t.Fatalf("relay with acme fenced: %v %v; want initech's row alone claimed and sent", stats, err)
	}
	if _, _, n := down.counts("acme"); n != 0 {
		t.Fatalf("acme's row was sent while acme is fenced")
	}
	if _, _, n := down.counts("initech"); n != 1 {
		t.Fatalf("initech's row: %d deliveries, want 1", n)
	}
	pgtest.Exec(t, db, `DELETE FROM cell_fences`)
	if stats, err := r.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil || stats["sent"] != 1 {
		t.Fatalf("relay after the fence: %v %v; want acme's row sent", stats, err)
	}
}
