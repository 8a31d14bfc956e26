package claim_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func (b *bundle) fence(tenant, state, movedTo string) {
	b.t.Helper()
	pgtest.Exec(b.t, b.db, `INSERT INTO cell_fences (tenant, state, moved_to) VALUES (?, ?, NULLIF(?, ''))
		ON CONFLICT (tenant) DO UPDATE SET state = EXCLUDED.state, moved_to = EXCLUDED.moved_to`, tenant, state, movedTo)
}

// wantMoving fails unless err is the fence's refusal in state.
func wantMoving(t *testing.T, err error, state string) *claim.TenantMovingError {
	t.Helper()
	var me *claim.TenantMovingError
	if !errors.Is(err, claim.ErrTenantMoving) || !errors.As(err, &me) || me.State != state {
		t.Fatalf("got %v, want ErrTenantMoving in state %s", err, state)
	}
	if errs.KindOf(err) != errs.Unavailable {
		t.Fatalf("kind %s, want unavailable", errs.KindOf(err))
	}
	return me
}

// A frozen tenant's claim is refused and writes nothing — no key, no event —, and so is its
// retry; other tenants claim meanwhile; once the fence is gone the same key is claimed.
func TestFence_FrozenTenantsClaimIsRefusedAndWritesNothing(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.fence("t1", claim.FenceFrozen, "")
	for range 2 {
		_, err := b.store.Claim(ctx, req("k1", payment(100)))
		if me := wantMoving(t, err, claim.FenceFrozen); me.Tenant != "t1" || me.MovedTo != "" {
			t.Fatalf("refusal names %+v", me)
		}
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`) + b.count(`SELECT count(*) FROM key_events`); n != 0 {
		t.Fatalf("%d rows written under the fence", n)
	}
	other := req("k1", payment(100))
	other.Tenant = "t2"
	if out, err := b.store.Claim(ctx, other); err != nil || out.Kind != claim.Acquired {
		t.Fatalf("another tenant: %v %v", out, err)
	}
	pgtest.Exec(t, b.db, `DELETE FROM cell_fences`)
	if out, err := b.store.Claim(ctx, req("k1", payment(100))); err != nil || out.Kind != claim.Acquired {
		t.Fatalf("after the fence: %v %v", out, err)
	}
}

// A tenant that moved away names the cell it went to, so a router can re-read the map.
func TestFence_GoneNamesTheNewCell(t *testing.T) {
	b := setup(t)
	b.fence("t1", claim.FenceGone, "b")
	_, err := b.store.Claim(context.Background(), req("k1", payment(100)))
	if me := wantMoving(t, err, claim.FenceGone); me.MovedTo != "b" {
		t.Fatalf("moved_to %q, want b", me.MovedTo)
	}
}

// While a tenant is fenced nothing new starts — no claim, no takeover by a retry or an operator —
// but the holder of a lease taken before the fence renews and ends it (a request in flight
// finishes; the mover revokes what is left after its wait), and a key that already has its
// answer replays it, as a read.
func TestFence_LeaseHoldersFinishButNothingNewStarts(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	held, err := b.store.Claim(ctx, req("live", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := b.store.Claim(ctx, req("crashed", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	b.expireLease(crashed.KeyID)
	b.fence("t1", claim.FenceFrozen, "")

	_, err = b.store.Claim(ctx, req("new", payment(100)))
	wantMoving(t, err, claim.FenceFrozen)
	_, err = b.store.Claim(ctx, req("crashed", payment(100))) // would take the expired lease over
	wantMoving(t, err, claim.FenceFrozen)
	if _, err := b.store.Takeover(ctx, crashed.KeyID, "operator:x"); !errors.Is(err, claim.ErrTenantMoving) {
		t.Fatalf("operator takeover while fenced: %v", err)
	}
	if err := b.store.Renew(ctx, held.Lease); err != nil {
		t.Fatalf("holder renews while fenced: %v", err)
	}
	snap := &claim.Snapshot{Status: 201, Body: []byte(`{}`)}
	if err := b.store.Complete(ctx, nil, held.Lease, snap); err != nil {
		t.Fatalf("holder completes while fenced: %v", err)
	}
	if s := b.state(held.KeyID); s != claim.StateCompleted {
		t.Fatalf("state %s", s)
	}
	if out, err := b.store.Claim(ctx, req("live", payment(100))); err != nil || out.Kind != claim.Replay {
		t.Fatalf("retry of a completed key while fenced: %v %v, want its replay", out, err)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`); n != 2 {
		t.Fatalf("%d keys, want the 2 claimed before the fence", n)
	}
}

// Writes to keys nobody holds are refused too (an operator's or retention's), whatever the
// fence's state.
func TestFence_KeysNobodyHoldsAreNotWritten(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	out, err := b.store.Claim(ctx, req("k1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{claim.FenceFrozen, claim.FenceIncoming, claim.FenceGone} {
		b.fence("t1", state, "")
		for _, q := range []string{`UPDATE idempotency_keys SET expires_at = now() WHERE id = ?`, `DELETE FROM idempotency_keys WHERE id = ?`} {
			if err := b.db.Exec(q, out.KeyID).Error; !errors.Is(claim.Fenced(err), claim.ErrTenantMoving) {
				t.Fatalf("%s while %s: %v, want the fence's refusal", q, state, err)
			}
		}
	}
}

// The reclaimer passes over a fenced tenant's expired leases (its new cell takes them over) and
// goes on with everyone else's instead of failing its whole batch.
func TestFence_ReclaimerSkipsFencedTenants(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	mine, err := b.store.Claim(ctx, req("k1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	r := req("k1", payment(100))
	r.Tenant = "t2"
	theirs, err := b.store.Claim(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	b.expireLease(mine.KeyID)
	b.expireLease(theirs.KeyID)
	b.fence("t1", claim.FenceFrozen, "")
	leases, err := b.store.TakeoverExpired(ctx, 10, "daemon")
	if err != nil || len(leases) != 1 || leases[0].KeyID != theirs.KeyID {
		t.Fatalf("took over %v (%v), want only t2's key %d", leases, err, theirs.KeyID)
	}
}

// The mover writes a fenced tenant's rows in transactions that name it (idemops.cell_move);
// any other tenant named there does not pass.
func TestFence_TheMoversTransactionPasses(t *testing.T) {
	b := setup(t)
	b.fence("t1", claim.FenceIncoming, "")
	insert := func(named string) error {
		return b.db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`SELECT set_config('idemops.cell_move', ?, true)`, named).Error; err != nil {
				return err
			}
			return tx.Exec(`INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
				request, state, downstream_key) VALUES ('t1', 'op', 'k', 'd', 'f', 1, '{}', 'failed_retryable', 'dk')`).Error
		})
	}
	if err := insert("t2"); err == nil {
		t.Fatal("a transaction naming another tenant wrote through the fence")
	}
	if err := insert("t1"); err != nil {
		t.Fatalf("the mover's own insert: %v", err)
	}
	// The setting is the transaction's: the next statement outside it is fenced again.
	if err := b.db.Exec(`DELETE FROM idempotency_keys WHERE tenant = 't1'`).Error; err == nil {
		t.Fatal("a delete after the mover's transaction passed the fence")
	}
}

// A consumer's dedup row for a fenced tenant is refused with the transaction it guards (the
// message is redelivered and consumed once, in the tenant's cell); consumers of other tenants,
// and those with no tenant, go on.
func TestFence_ConsumedMessagesOfAFencedTenantAreRefused(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.fence("t1", claim.FenceFrozen, "")
	_, err := claim.RecordConsumed(ctx, b.db, claim.Consumed{Consumer: "c", Tenant: "t1", BusinessKey: "o1", MessageID: "m1"})
	wantMoving(t, err, claim.FenceFrozen)
	_, err = claim.RecordConsumedBatch(ctx, b.db, "c", []claim.Consumed{{Tenant: "t2", BusinessKey: "o2", MessageID: "m2"}, {Tenant: "t1", BusinessKey: "o3", MessageID: "m3"}})
	wantMoving(t, err, claim.FenceFrozen)
	for _, c := range []claim.Consumed{{Consumer: "c", Tenant: "t2", BusinessKey: "o4", MessageID: "m4"}, {Consumer: "c", BusinessKey: "o5", MessageID: "m5"}} {
		if first, err := claim.RecordConsumed(ctx, b.db, c); err != nil || !first {
			t.Fatalf("%+v: %v %v", c, first, err)
		}
	}
	if n := b.count(`SELECT count(*) FROM consumed_messages WHERE tenant = 't1'`); n != 0 {
		t.Fatalf("%d rows of the fenced tenant", n)
	}
}
