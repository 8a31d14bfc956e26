package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// ledger is a local-only operation for the one-commit path: it writes one credit row per
// execution, in the claim's transaction.
type ledger struct {
	b     *bundle
	calls atomic.Int64
	// refuse answers a final business refusal; fail an ordinary error.
	refuse, fail bool
}

func newLedger(b *bundle) *ledger {
	pgtest.Exec(b.t, b.db, `CREATE TABLE credits (id bigserial PRIMARY KEY, key_id bigint NOT NULL, amount bigint NOT NULL)`)
	return &ledger{b: b}
}

func (g *ledger) credit(ctx context.Context, tx *gorm.DB, l *claim.Lease) (*claim.Snapshot, error) {
	g.calls.Add(1)
	if err := tx.WithContext(ctx).Exec(`INSERT INTO credits (key_id, amount) VALUES (?, ?)`, l.KeyID, *l.Amount).Error; err != nil {
		return nil, err
	}
	switch {
	case g.refuse:
		return nil, claim.FinalFailure("limit_exceeded", "the credit limit is reached", &claim.Snapshot{Status: 422, Body: []byte(`{"error":"limit_exceeded"}`)})
	case g.fail:
		return nil, errors.New("the business write failed")
	}
	id := fmt.Sprintf("cr_%d", l.KeyID)
	return &claim.Snapshot{Status: 201, Body: []byte(`{"credit_id":"` + id + `"}`), ResourceID: id}, nil
}

func (g *ledger) credits() int64 { return g.b.count(`SELECT count(*) FROM credits`) }

func TestRunLocal_ClaimBusinessRowsAndCompletionCommitTogether(t *testing.T) {
	b := setup(t)
	g := newLedger(b)
	ctx := context.Background()
	out, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != claim.Completed || out.State != claim.StateCompleted || out.Snapshot == nil || out.Snapshot.Status != 201 {
		t.Fatalf("first run: %+v", out)
	}
	if got := b.events(out.KeyID); fmt.Sprint(got) != "[claimed completed]" {
		t.Errorf("history %v, want [claimed completed]", got)
	}
	again, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit)
	if err != nil {
		t.Fatal(err)
	}
	if again.Kind != claim.Replay || string(again.Snapshot.Body) != string(out.Snapshot.Body) {
		t.Fatalf("retry: %+v, want the first snapshot replayed", again)
	}
	other, err := b.store.RunLocal(ctx, req("k1", payment(900)), g.credit)
	if err != nil || other.Kind != claim.Mismatch {
		t.Fatalf("same key, another amount: %+v, %v; want mismatch", other, err)
	}
	if g.calls.Load() != 1 || g.credits() != 1 {
		t.Errorf("%d executions, %d credit rows; want 1 and 1", g.calls.Load(), g.credits())
	}
}

func TestRunLocal_AnErrorRollsBackTheKeyToo(t *testing.T) {
	b := setup(t)
	g := newLedger(b)
	ctx := context.Background()
	g.fail = true
	if _, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit); err == nil {
		t.Fatal("want the business error")
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`); n != 0 || g.credits() != 0 {
		t.Fatalf("after a failed attempt: %d keys, %d credits; want nothing kept", n, g.credits())
	}
	g.fail = false
	out, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit)
	if err != nil || out.Kind != claim.Completed {
		t.Fatalf("the retry with the same key: %+v, %v; want it executed", out, err)
	}
	if g.credits() != 1 {
		t.Errorf("%d credits, want 1", g.credits())
	}
}

func TestRunLocal_ABusinessRefusalIsRecordedAndReplayed(t *testing.T) {
	b := setup(t)
	g := newLedger(b)
	ctx := context.Background()
	g.refuse = true
	out, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit)
	if err != nil || out.Kind != claim.Failed || out.State != claim.StateFailedFinal {
		t.Fatalf("refusal: %+v, %v", out, err)
	}
	if g.credits() != 0 {
		t.Errorf("the refused attempt's rows stayed: %d credits", g.credits())
	}
	g.refuse = false
	again, err := b.store.RunLocal(ctx, req("k1", payment(500)), g.credit)
	if err != nil || again.Kind != claim.Replay || again.Failure == nil || again.Failure.Code != "limit_exceeded" {
		t.Fatalf("retry after a refusal: %+v, %v; want the refusal replayed", again, err)
	}
	if g.calls.Load() != 1 {
		t.Errorf("%d executions, want 1", g.calls.Load())
	}
}

// Racing duplicates wait on the unique index for the first transaction, then replay it: one
// execution, one credit, and nobody is told "in progress".
func TestRunLocal_RacingDuplicatesWaitAndReplay(t *testing.T) {
	b := setup(t)
	g := newLedger(b)
	const n = 24
	var wg sync.WaitGroup
	kinds := make([]claim.Kind, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.store.RunLocal(context.Background(), req("race", payment(700)), g.credit)
			errs[i] = err
			if out != nil {
				kinds[i] = out.Kind
			}
		}()
	}
	wg.Wait()
	count := map[claim.Kind]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("duplicate %d: %v", i, errs[i])
		}
		count[kinds[i]]++
	}
	if count[claim.Completed] != 1 || count[claim.Replay] != n-1 {
		t.Errorf("outcomes %v; want 1 completed and %d replays", count, n-1)
	}
	if g.calls.Load() != 1 || g.credits() != 1 {
		t.Errorf("%d executions, %d credits; want 1 and 1", g.calls.Load(), g.credits())
	}
}
