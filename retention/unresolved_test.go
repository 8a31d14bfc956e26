package retention_test

import (
	"context"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/retention"
)

// channel is the downstream of the keys below: it keeps what it charged, and a Lookup finds it.
// It counts the charges made through Execute.
type channel struct {
	mu       sync.Mutex
	charged  map[string]bool
	executes int
}

func (*channel) Name() string             { return "payment.charge" }
func (*channel) Intent() claim.IntentSpec { return claim.IntentSpec{} }
func (c *channel) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.executes++
	c.charged[l.DownstreamKey] = true
	return &claim.Document{ResourceID: "ch"}, nil
}
func (c *channel) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.charged[l.DownstreamKey] {
		return &claim.Document{ResourceID: "ch"}, nil
	}
	return nil, nil
}
func (*channel) Apply(context.Context, *gorm.DB, *claim.Lease, *claim.Document) (*claim.Snapshot, error) {
	return &claim.Snapshot{Status: 201, ResourceID: "ch"}, nil
}

// TestPurge_NeverPurgesAKeyWhoseOutcomeIsUnknownUntilResolved: a key whose attempt may have
// acted outside and that waits for an operator or a retry that asks first — held after a 5xx on
// a route with external effects (or a plain gRPC handler's error), failed retryably on a timeout —
// is never purged, however old, until it is resolved: a late retry of a purged one would charge
// again without asking. Keys resolved (downstream twice said not found, or an operator released
// them) go by policy as before.
func TestPurge_NeverPurgesAKeyWhoseOutcomeIsUnknownUntilResolved(t *testing.T) {
	b := setup(t)
	ch := &channel{charged: map[string]bool{}}
	failed := func(key string, f *claim.Failure, acted bool) int64 {
		t.Helper()
		l := b.claimKey("payment.charge", key)
		if acted {
			ch.charged[l.DownstreamKey] = true // the attempt reached the channel
		}
		if err := b.store.Fail(b.ctx, nil, l, f); err != nil {
			t.Fatal(err)
		}
		return l.KeyID
	}
	held := failed("held", claim.HeldFailure("http_502", "Bad Gateway", &claim.Snapshot{Status: 502, Body: []byte(`{}`)}), true)
	unknown := failed("timed-out", claim.RetryableFailure("timeout", "no answer from the channel"), true)
	absent := failed("proven-absent", claim.RetryableFailure("downstream_not_found", "downstream twice said not found"), false)
	released := failed("released", claim.RetryableFailure("timeout", "no answer"), false)
	k, _ := b.store.Get(b.ctx, released)
	if err := keys.ReleaseForRetry(b.ctx, b.store, nil, k.ID, k.Version, "operator:ada", "the channel has nothing"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{held, unknown, absent, released} {
		b.age(id, 400*day)
	}

	b.purge(retention.Options{})

	if !b.exists(held) || !b.exists(unknown) {
		t.Errorf("unresolved keys purged: held %v, timed out %v", b.exists(held), b.exists(unknown))
	}
	if b.exists(absent) || b.exists(released) {
		t.Errorf("resolved keys kept: proven absent %v, released %v", b.exists(absent), b.exists(released))
	}
	// The late retries: answered (held) or settled from the channel (asked first), never charged.
	for _, key := range []string{"held", "timed-out"} {
		if _, err := b.store.Run(b.ctx, ch, request("payment.charge", key)); err != nil {
			t.Fatal(err)
		}
	}
	if ch.executes != 0 {
		t.Errorf("late retries charged the channel %d times; want 0", ch.executes)
	}
}
