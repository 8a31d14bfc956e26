package claim_test

import (
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// wantEvent is one expected history entry; Detail is the jsonb text the event's row held.
type wantEvent struct{ Kind, Actor, Detail string }

func (b *bundle) checkTimeline(keyID int64, want []wantEvent) []claim.Event {
	b.t.Helper()
	evs, err := b.store.History(ctx, keyID, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	var got, exp []string
	for i, e := range evs {
		got = append(got, e.Kind+"/"+e.Actor+"/"+string(e.Detail))
		if i > 0 && e.ID <= evs[i-1].ID {
			b.t.Errorf("event %d (%s) id %d does not follow %d", i, e.Kind, e.ID, evs[i-1].ID)
		}
		if e.KeyID != keyID {
			b.t.Errorf("event %d of key %d", i, e.KeyID)
		}
	}
	for _, w := range want {
		exp = append(exp, w.Kind+"/"+w.Actor+"/"+w.Detail)
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		b.t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
	return evs
}

// The happy path's claim and completion are kept on the key row (no key_events rows), and the
// timeline reads exactly as it did when they were rows: same kinds, actors, details and times,
// in id order among the stored events — one written in the completing transaction before the
// completion sorts before it, one written after sorts after.
func TestHistory_ClaimedThenCompletedTimelineIsUnchanged(t *testing.T) {
	b := setup(t)
	out, err := b.store.Claim(ctx, req("k", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	snap := &claim.Snapshot{Status: 201, Body: []byte(`{"id":"p1"}`), ResourceID: "p1"}
	if err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, 'applied', 'test', '{}')`, out.KeyID).Error; err != nil {
			return err
		}
		return b.store.Complete(ctx, tx, out.Lease, snap)
	}); err != nil {
		t.Fatal(err)
	}
	if o, _ := b.store.Claim(ctx, req("k", payment(999))); o == nil || o.Kind != claim.Mismatch {
		t.Fatalf("other intent: %+v", o)
	}
	if err := b.store.RecordEvent(ctx, out.KeyID, "revealed", "operator:alice", map[string]any{"what": "response"}); err != nil {
		t.Fatal(err)
	}

	evs := b.checkTimeline(out.KeyID, []wantEvent{
		{"claimed", "service:test", `{"owner": "test", "attempt": 1}`},
		{"applied", "test", `{}`},
		{"completed", "service:test", `{"status": 201, "attempt": 1, "resource_id": "p1"}`},
		{"mismatch_rejected", "service:test", `{"fingerprint": "` + fingerprint(t, payment(999)) + `"}`},
		{"revealed", "operator:alice", `{"what": "response"}`},
	})
	k, err := b.store.Get(ctx, out.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if !evs[0].At.Equal(k.CreatedAt) || k.CompletedAt == nil || !evs[2].At.Equal(*k.CompletedAt) {
		t.Errorf("claimed at %s (key created %s), completed at %s (key completed %v)", evs[0].At, k.CreatedAt, evs[2].At, k.CompletedAt)
	}
	if n := b.count(`SELECT count(*) FROM key_events WHERE kind IN ('claimed', 'completed')`); n != 0 {
		t.Errorf("%d happy-path events stored as rows, want none", n)
	}
}

// A key that failed, was taken over after its lease ran out and completed on a later attempt,
// then replayed: every transition in order, the stored ones (taken_over, downstream_not_found,
// executing) between the claim and the completion read from the key row.
func TestHistory_TakeoverAndReplayTimelineIsUnchanged(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.Quarantine = time.Hour })
	op := newFakeOp()
	first, _ := b.store.Claim(ctx, req("k", payment(100)))
	b.expireLease(first.KeyID)
	if out, err := b.store.Run(ctx, op, req("k", payment(100))); err != nil || out.Kind != claim.InProgress {
		t.Fatalf("%+v %v", out, err)
	}
	b.ageNotFound(first.KeyID, time.Hour+time.Second)
	out, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || out.Kind != claim.Completed {
		t.Fatalf("%+v %v", out, err)
	}
	if again, err := b.store.Run(ctx, op, req("k", payment(100))); err != nil || again.Kind != claim.Replay {
		t.Fatalf("replay: %+v %v", again, err)
	}
	rid := out.ResourceID
	b.checkTimeline(first.KeyID, []wantEvent{
		{"claimed", "service:test", `{"owner": "test", "attempt": 1}`},
		{"taken_over", "service:test", `{"owner": "test", "attempt": 2}`},
		{"downstream_not_found", "service:test", `{"attempt": 2, "quarantine_s": 3600}`},
		{"taken_over", "service:test", `{"owner": "test", "attempt": 3}`},
		{"executing", "service:test", `{"attempt": 3}`},
		{"completed", "service:test", `{"status": 201, "attempt": 3, "recovered": false, "resource_id": "` + rid + `"}`},
	})
	if n := b.count(`SELECT count(*) FROM key_events WHERE key_id = ?`, first.KeyID); n != 4 {
		t.Errorf("%d stored events, want the 4 off the happy path", n)
	}
}

func fingerprint(t *testing.T, intent []byte) string {
	t.Helper()
	in, err := claim.Canonicalize(intent, (&fakeOp{}).Intent())
	if err != nil {
		t.Fatal(err)
	}
	return in.Fingerprint
}
