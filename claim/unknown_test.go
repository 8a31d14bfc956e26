package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
)

// TestDrive_WithoutExecuteNeverExecutesOnAnyBranch: a holder that may not execute (the daemon's
// reclaimer for an operation without redrive, a reconciliation Recover) never reaches the
// Operation's Execute — not on a fresh lease, not on a key an operator released for retry, not
// once absence is proven on an operation that opts into redrive (the reclaimer decides redrive,
// not Drive). It asks downstream and records what it finds.
func TestDrive_WithoutExecuteNeverExecutesOnAnyBranch(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.Quarantine = time.Minute })
	ctx := context.Background()
	op := newFakeOp()
	op.redrive = true
	lease := func(key string) *claim.Lease {
		t.Helper()
		out, err := b.store.Claim(ctx, req(key, payment(100)))
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("claim %s: %+v %v", key, out, err)
		}
		return out.Lease
	}
	failed := func(key string) *claim.Key {
		t.Helper()
		l := lease(key)
		if err := b.store.Fail(ctx, nil, l, claim.RetryableFailure("timeout", "no answer")); err != nil {
			t.Fatal(err)
		}
		k, err := b.store.Get(ctx, l.KeyID)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	// A fresh lease.
	if _, err := b.store.Drive(ctx, op, lease("fresh"), claim.DriveOptions{Execute: false}); err != nil {
		t.Fatal(err)
	}
	// A key an operator released for retry.
	k := failed("released")
	if err := keys.ReleaseForRetry(ctx, b.store, nil, k.ID, k.Version, "operator:ada", "checked"); err != nil {
		t.Fatal(err)
	}
	l, err := b.store.Takeover(ctx, k.ID, "operator:olga")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Drive(ctx, op, l, claim.DriveOptions{Execute: false}); err != nil {
		t.Fatal(err)
	}
	// Absence proven (two not-founds a quarantine apart) on a redrive operation.
	k = failed("proven")
	b.db.Exec(`UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, k.ID)
	if l, err = b.store.Takeover(ctx, k.ID, "operator:olga"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Drive(ctx, op, l, claim.DriveOptions{Execute: false}); err != nil {
		t.Fatal(err)
	}
	if n := op.executes.Load(); n != 0 {
		t.Fatalf("Drive(Execute: false) executed %d times; want 0", n)
	}
}
