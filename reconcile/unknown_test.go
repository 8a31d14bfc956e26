package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
)

// TestRecover_ReleasedForRetryKeyIsLookedUpNeverExecuted: an administrator released the key of a
// CHANNEL_ONLY finding for retry. Recover — "Drive without executing" — still asks the channel
// first and records its charge; it never charges.
func TestRecover_ReleasedForRetryKeyIsLookedUpNeverExecuted(t *testing.T) {
	b := setup(t)
	k, f := channelOnly(b, "released")
	key, err := b.store.Get(b.ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.ReleaseForRetry(b.ctx, b.store, nil, key.ID, key.Version, "operator:ada", "looked like nothing went out"); err != nil {
		t.Fatal(err)
	}
	rec, err := b.rec.Recover(b.ctx, f.ID, "alice", "the channel has the charge")
	if b.op.executes != 0 {
		t.Errorf("recover executed the charge %d times; want 0", b.op.executes)
	}
	if err != nil || rec.Outcome != claim.Recovered || rec.State != claim.StateCompleted {
		t.Fatalf("recover: %+v %v; want the channel's charge recorded", rec, err)
	}
}

// redriving is the test channel as an Operation that opts into redrive: the daemon may execute
// its keys again once downstream twice said not found.
type redriving struct{ *chargeOp }

func (redriving) Redrive() bool { return true }

// TestRecover_RedriveOperationNeverExecutesAFindingTheStatementShows: the channel's statement
// shows a charge (CHANNEL_ONLY) that its lookup misses, a quarantine after a first not-found.
// Recover rests on the statement: it never executes, on a redrive operation either; the key is
// held for an operator instead of being left for a blind retry.
func TestRecover_RedriveOperationNeverExecutesAFindingTheStatementShows(t *testing.T) {
	b := setup(t, func(c *reconcile.Config) {
		r := c.Operations.(registry)
		for name, op := range r {
			r[name] = redriving{op.(*chargeOp)}
		}
	})
	op := b.op
	k, f := channelOnly(b, "missed")
	delete(op.docs, k.DownstreamKey) // the lookup misses what the statement shows
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, k.ID)

	_, err := b.rec.Recover(b.ctx, f.ID, "alice", "the statement has the charge")
	if op.executes != 0 {
		t.Errorf("recover executed the charge %d times; want 0", op.executes)
	}
	if err == nil {
		t.Fatal("recover of a charge the lookup misses succeeded")
	}
	key, gerr := b.store.Get(b.ctx, k.ID)
	if gerr != nil || key.State != claim.StateFailedRetryable || !key.Held || !key.NeedsAttention {
		t.Errorf("key after recover: %v, held %v, needs attention %v (%v); want held for an operator", key.State, key.Held, key.NeedsAttention, gerr)
	}
	if got, _ := b.rec.GetFinding(b.ctx, f.ID); got.State != reconcile.FindingOpen {
		t.Errorf("finding %s; want it open", got.State)
	}
}

// buggyLookup is the test channel whose Lookup has a bug: an index out of range.
type buggyLookup struct{ *chargeOp }

func (buggyLookup) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	return nil, nil
}

// TestRecover_PanickingLookupIsRecoveredNothingExecuted: a panic in the operation's Lookup
// during Recover is recovered where it happens: Recover answers an error naming the panic's
// type, the key is parked (its lookup counted as failed), the finding stays open, nothing runs.
func TestRecover_PanickingLookupIsRecoveredNothingExecuted(t *testing.T) {
	b := setup(t, func(c *reconcile.Config) {
		r := c.Operations.(registry)
		for name, op := range r {
			r[name] = buggyLookup{op.(*chargeOp)}
		}
	})
	k, f := channelOnly(b, "buggy")
	_, err := b.rec.Recover(b.ctx, f.ID, "alice", "the channel has the charge")
	if err == nil || !strings.Contains(err.Error(), "runtime.boundsError") {
		t.Fatalf("recover: %v; want an error naming the panic's type", err)
	}
	key, _ := b.store.Get(b.ctx, k.ID)
	if b.op.executes != 0 || key.State != claim.StateProcessing || key.LookupFailures != 1 {
		t.Errorf("executes %d, key %s with %d failed lookups; want parked after one", b.op.executes, key.State, key.LookupFailures)
	}
}
