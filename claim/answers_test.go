package claim_test

import (
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
)

// A released first claim leaves no record: its recorded answers go with it, and the flush of a
// key already gone writes nothing (no orphans).
func TestAnswers_GoWithAReleasedFirstClaim(t *testing.T) {
	b := setup(t)
	out, _ := b.store.Claim(ctx, req("k", payment(100)))
	rec := claim.NewAnswerRecorder(b.db, claim.AnswerRecorderConfig{FlushEvery: time.Hour})
	rec.Record(out.KeyID, claim.AnswerInProgress, 409)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM key_answers WHERE key_id = ?`, out.KeyID); n != 1 {
		t.Fatalf("answers after flush: %d, want 1", n)
	}
	if err := b.store.Release(ctx, out.Lease, "validation failed"); err != nil {
		t.Fatal(err)
	}
	rec.Record(out.KeyID, claim.AnswerInProgress, 409)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM key_answers`); n != 0 {
		t.Fatalf("a released key left %d answer records", n)
	}
}
