package replay_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/replay"
)

// channel is a payment channel that keeps what it charged: Lookup finds every charge Execute
// made. It counts charges per downstream key.
type channel struct {
	mu      sync.Mutex
	charges map[string]int
}

func (*channel) Name() string { return "payment.charge" }
func (*channel) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency"}
}
func (c *channel) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.charges[l.DownstreamKey]++
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:8]}, nil
}
func (c *channel) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.charges[l.DownstreamKey] == 0 {
		return nil, nil
	}
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:8]}, nil
}
func (*channel) Apply(_ context.Context, _ *gorm.DB, _ *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return &claim.Snapshot{Status: 201, Body: []byte(`{"charge":"` + doc.ResourceID + `"}`), ResourceID: doc.ResourceID}, nil
}

func (c *channel) count(dk string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.charges[dk]
}

// TestReplay_ReleasedForRetryKeyAsksDownstreamFirstNeverChargesTwice: the service charged, then
// lost the answer (failed retryable); an administrator released the key for retry. An operator's
// replay preview finds the charge at the channel ("nothing is sent"), and the confirmed replay
// records it: it asks downstream first whatever flags the lease carries, and the channel is
// charged once.
func TestReplay_ReleasedForRetryKeyAsksDownstreamFirstNeverChargesTwice(t *testing.T) {
	t.Parallel()
	ch := &channel{charges: map[string]int{}}
	f := newFixtureOps(t, func(name string) (claim.Operation, bool) { return ch, name == ch.Name() })
	ctx := context.Background()
	out, err := f.claims.Claim(ctx, claim.Request{Tenant: "acme", Operation: ch.Name(), Key: "paid-then-lost",
		Intent: json.RawMessage(`{"amount":500,"currency":"USD"}`), Spec: ch.Intent(), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", out, err)
	}
	if _, err := ch.Execute(ctx, out.Lease); err != nil { // the charge went through…
		t.Fatal(err)
	}
	if err := f.claims.Fail(ctx, nil, out.Lease, claim.RetryableFailure("timeout", "no answer from the channel")); err != nil {
		t.Fatal(err) // …and its answer was lost
	}
	k, _ := f.claims.Get(ctx, out.KeyID)
	if err := keys.ReleaseForRetry(ctx, f.claims, nil, k.ID, k.Version, "operator:ada", "looked like nothing went out"); err != nil {
		t.Fatal(err)
	}
	k, _ = f.claims.Get(ctx, out.KeyID)

	p := f.w.Preview(ctx, f.actor, k)
	if p.Outcome != replay.PredictRecorded || p.Token == "" {
		t.Fatalf("preview: %+v; want recorded, nothing sent", p)
	}
	req, _, err := f.w.Confirm(ctx, f.actor, k, p.Token, "the channel has it; record it")
	if err != nil {
		t.Fatal(err)
	}
	if n := ch.count(out.Lease.DownstreamKey); n != 1 {
		t.Errorf("the channel was charged %d times; want 1 (the preview said nothing is sent)", n)
	}
	if req.OutcomeKind == nil || *req.OutcomeKind != "recorded" {
		t.Errorf("replay outcome %s (%s); want recorded", deref(req.OutcomeKind), deref(req.Outcome))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestReplay_ExecutesOnlyWhatItsPreviewShowed: a preview that said "the channel already has it —
// nothing is sent" confirms no send, even when downstream's answer has changed to "not found"
// (a quarantine after a first one) by the confirmation: the prediction is checked again and the
// confirmation is refused; a confirmation that carries no preview's prediction never executes.
func TestReplay_ExecutesOnlyWhatItsPreviewShowed(t *testing.T) {
	t.Parallel()
	ch := &channel{charges: map[string]int{}}
	f := newFixtureOps(t, func(name string) (claim.Operation, bool) { return ch, name == ch.Name() })
	ctx := context.Background()
	failed := func(key string, charged bool) *claim.Key {
		t.Helper()
		out, err := f.claims.Claim(ctx, claim.Request{Tenant: "acme", Operation: ch.Name(), Key: key,
			Intent: json.RawMessage(`{"amount":700,"currency":"USD"}`), Spec: ch.Intent(), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("claim: %+v %v", out, err)
		}
		if charged {
			if _, err := ch.Execute(ctx, out.Lease); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.claims.Fail(ctx, nil, out.Lease, claim.RetryableFailure("timeout", "no answer from the channel")); err != nil {
			t.Fatal(err)
		}
		k, _ := f.claims.Get(ctx, out.KeyID)
		return k
	}

	k := failed("recorded-then-missing", true)
	p := f.w.Preview(ctx, f.actor, k)
	if p.Outcome != replay.PredictRecorded {
		t.Fatalf("preview: %+v; want recorded", p)
	}
	ch.mu.Lock()
	ch.charges[k.DownstreamKey] = 0 // the channel's lookup no longer finds it…
	ch.mu.Unlock()
	f.db.Exec(`UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, k.ID) // …for a quarantine now
	k, _ = f.claims.Get(ctx, k.ID)
	if _, _, err := f.w.Confirm(ctx, f.actor, k, p.Token, "record it"); err == nil {
		t.Error("a confirmation of a 'nothing is sent' preview went ahead although a replay now would send")
	}
	if n := ch.count(k.DownstreamKey); n != 0 {
		t.Errorf("the channel was charged %d times by a confirmation of 'nothing is sent'", n)
	}

	// A confirmation without a preview's prediction (a token of the older form) never sends.
	k = failed("no-prediction", false)
	f.db.Exec(`UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, k.ID)
	k, _ = f.claims.Get(ctx, k.ID)
	req, _, err := f.w.Confirm(ctx, f.actor, k, f.w.ConfirmToken(replay.ActionReplay, f.actor.ID, k.ID, k.Version), "try")
	if err == nil && req.OutcomeKind != nil && *req.OutcomeKind == "sent" || ch.count(k.DownstreamKey) != 0 {
		t.Errorf("a confirmation without a prediction sent (%v, %d charges)", err, ch.count(k.DownstreamKey))
	}

	// The preview that showed a send sends, once.
	k = failed("proven-absent", false)
	f.db.Exec(`UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, k.ID)
	k, _ = f.claims.Get(ctx, k.ID)
	p = f.w.Preview(ctx, f.actor, k)
	if p.Outcome != replay.PredictSend {
		t.Fatalf("preview: %+v; want send", p)
	}
	if req, _, err := f.w.Confirm(ctx, f.actor, k, p.Token, "send it"); err != nil || req.OutcomeKind == nil || *req.OutcomeKind != "sent" {
		t.Fatalf("confirm of a send: %+v %v", req, err)
	}
	if n := ch.count(k.DownstreamKey); n != 1 {
		t.Errorf("charged %d times; want 1", n)
	}
}

// buggyChannel is a channel whose Execute has a bug (an index out of range) and whose lookup
// never finds anything.
type buggyChannel struct{ channel }

func (*buggyChannel) Lookup(context.Context, *claim.Lease) (*claim.Document, error) { return nil, nil }
func (*buggyChannel) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	return nil, nil
}

// TestReplay_PanickingExecuteIsRecoveredAndTheKeyHeld: a panic in the operation's Execute during
// an operator's replay (held in the background) and during a bulk replay (in the daemon's job)
// is recovered where it happens: the request ends failed naming the panic's type, the key is
// held for an operator (the action may have reached the channel), and the process stays up.
func TestReplay_PanickingExecuteIsRecoveredAndTheKeyHeld(t *testing.T) {
	t.Parallel()
	ch := &buggyChannel{channel{charges: map[string]int{}}}
	f := newFixtureOps(t, func(name string) (claim.Operation, bool) { return ch, name == ch.Name() })
	ctx := context.Background()
	keys := f.seedProvenAbsent(3)

	k := &keys[0]
	p := f.w.Preview(ctx, f.actor, k)
	if p.Outcome != replay.PredictSend {
		t.Fatalf("preview: %+v; want send", p)
	}
	req, _, err := f.w.Confirm(ctx, f.actor, k, p.Token, "send it")
	if err != nil {
		t.Fatal(err)
	}
	if req.State != "failed" || !strings.Contains(deref(req.Outcome), "runtime.boundsError") {
		t.Errorf("request %s: %s; want failed, naming the panic's type", req.State, deref(req.Outcome))
	}

	run := f.start(keys[1:])
	d := newReplica(t, f.db, "cli", f.w)
	if _, err := d.RunJob(ctx, replay.BulkJobName); err != nil {
		t.Fatal(err)
	}
	items, err := f.w.BulkItems(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if deref(it.Result) != "error" || !strings.Contains(deref(it.Detail), "runtime.boundsError") {
			t.Errorf("bulk item %d: %s (%s); want an error naming the panic's type", it.KeyID, deref(it.Result), deref(it.Detail))
		}
	}
	for _, k := range keys {
		got, _ := f.claims.Get(ctx, k.ID)
		if got.State != claim.StateFailedRetryable || !got.Held {
			t.Errorf("key %d: %s, held %v; want held for an operator", k.ID, got.State, got.Held)
		}
	}
}
