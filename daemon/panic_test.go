package daemon_test

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// buggyOp is an Operation with a bug in one method: where names it ("lookup", "execute",
// "apply"); the bug is an index out of range on the downstream key, as demo/shipping.go's
// dk[:16] had with a short key. It opts into redrive, so the reclaimer reaches Execute once
// downstream proved the key absent.
type buggyOp struct {
	*fakeOp
	where string
}

func (o buggyOp) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	if o.where == "lookup" {
		_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	}
	return o.fakeOp.Lookup(ctx, l)
}

func (o buggyOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	if o.where == "execute" {
		_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	}
	return o.fakeOp.Execute(ctx, l)
}

func (o buggyOp) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if o.where == "apply" {
		_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	}
	return o.fakeOp.Apply(ctx, tx, l, doc)
}

func (buggyOp) Redrive() bool { return true }

// TestReclaim_PanickingOperationIsRecoveredTheKeyHeldTheRunFailed: a panic in an operation's
// Lookup, Execute or Apply inside a reclaim worker is recovered where it happens: the daemon
// stays up, the run fails naming the panic's type, a key whose operation may have acted
// (Execute, Apply) is held for an operator, and one whose lookup panicked is parked (then
// flagged) — never executed.
func TestReclaim_PanickingOperationIsRecoveredTheKeyHeldTheRunFailed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newStore(t, db, "daemon", nil)
	missing := func(*claim.Lease) (*claim.Document, error) { return nil, nil }
	registry := ops{
		"op.lookup":  buggyOp{newFakeOp("op.lookup", found), "lookup"},
		"op.execute": buggyOp{newFakeOp("op.execute", missing), "execute"},
		"op.apply":   buggyOp{newFakeOp("op.apply", found), "apply"},
	}
	keys := map[string]int64{}
	for name := range registry {
		keys[name] = seedExpired(t, s, name, "k", 1)[0]
	}
	job := newReclaim(t, s, registry, daemon.ReclaimConfig{})
	get := func(name string) *claim.Key {
		k, err := s.Get(context.Background(), keys[name])
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	panicked := 0
	for pass := 0; !(get("op.execute").Held && get("op.apply").Held && get("op.lookup").NeedsAttention); pass++ {
		if pass == 100 {
			t.Fatalf("not settled after %d passes", pass)
		}
		if _, err := job.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			if !strings.Contains(err.Error(), "runtime.boundsError") {
				t.Fatalf("run error %v; want the panic's type named", err)
			}
			panicked++
		}
		// The next pass when the parked keys are due again (the lookup backoff, the quarantine).
		pgtest.SleepUntil(t, db, `SELECT min(lease_expires_at) FROM idempotency_keys WHERE state = 'processing'`)
	}
	if panicked == 0 {
		t.Error("no run failed although operations panicked")
	}
	for name, k := range map[string]*claim.Key{"op.execute": get("op.execute"), "op.apply": get("op.apply")} {
		if k.State != claim.StateFailedRetryable || !k.NeedsAttention {
			t.Errorf("%s: %s, attention %v; want held for an operator", name, k.State, k.NeedsAttention)
		}
	}
	if k := get("op.lookup"); k.State != claim.StateProcessing || registry["op.lookup"].(buggyOp).exec[k.ID] != 0 {
		t.Errorf("op.lookup: %s; want parked, never executed", k.State)
	}
}

// panickySender's Send or Lookup panics.
type panickySender struct {
	*fakeDownstream
	inSend bool
}

func (p panickySender) Send(ctx context.Context, key string, payload []byte) error {
	if p.inSend {
		_ = key[:len(key)+1]
	}
	return p.fakeDownstream.Send(ctx, key, payload)
}

func (p panickySender) Lookup(_ context.Context, key string) (bool, error) {
	_ = key[:len(key)+1]
	return false, nil
}

// TestOutbox_PanickingSenderIsRecoveredAndTheRunFailed: a Sender whose Send panics leaves the
// send's outcome unknown: the relay stays up, the row goes back to pending counted as sent once
// (its next attempt asks downstream first), and the run fails naming the panic's type; a Lookup
// that panics never leads to a send.
func TestOutbox_PanickingSenderIsRecoveredAndTheRunFailed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-panic")
	down := newDownstream(false)
	r := newRelay(t, db, panickySender{down, true}, nil)
	if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err == nil || !strings.Contains(err.Error(), "runtime.boundsError") {
		t.Fatalf("run error %v; want the panic's type named", err)
	}
	if row := outboxRow(t, db); row.State != "pending" {
		t.Fatalf("row after a panicking send: %+v; want pending", row)
	}
	// The next attempt asks first; its Lookup panics too: nothing is sent.
	r = newRelay(t, db, panickySender{down, false}, nil)
	var err error
	passUntil(t, db, 100, "a second attempt", func() {
		_, err = r.RunOnce(context.Background(), nil, daemon.NopProgress{})
	}, func() bool { return err != nil })
	if sends, _, deliveries := down.counts("dk-panic"); sends != 0 || deliveries != 0 {
		t.Fatalf("sends %d, deliveries %d after a panicking lookup; want none", sends, deliveries)
	}
}
