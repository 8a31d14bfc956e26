package grpcidem_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// plainMethod makes the world's method a plain handler: neither an Operation (Run) nor
// Transactional, so it may touch the outside world (a channel) outside the key's transaction.
func plainMethod(_ *claim.Config, m *grpcidem.Method) { m.Transactional = false }

// TestGRPC_PlainHandlerUnavailableHoldsKeyNeverRunsTwice: a plain handler that calls a channel
// and answers Unavailable (or any error that is not a stored business outcome, or panics) has an
// unknown outcome outside. Its key is held, never released: every retry answers NEEDS_RECOVERY
// and the handler — the channel's charge — runs once, however often the client retries.
func TestGRPC_PlainHandlerUnavailableHoldsKeyNeverRunsTwice(t *testing.T) {
	w := newWorld(t, plainMethod)
	for _, outcome := range []string{"unavailable", "deadline", "internal", "plain", "panic"} {
		t.Run(outcome, func(t *testing.T) {
			in := pay
			in.Outcome = outcome
			key := []string{"k-" + outcome}
			before := w.pay.calls.Load()
			if r := w.call(w.conn, "tok-a", key, in); r.err == nil {
				t.Fatalf("first attempt answered OK: %+v", r.reply)
			}
			for i := range 4 { // a client retrying with its one key
				r := w.call(w.conn, "tok-a", key, in)
				if status.Code(r.err) != codes.FailedPrecondition || grpcidem.Reason(r.err) != grpcidem.ReasonNeedsRecovery {
					t.Errorf("retry %d: %v; want FailedPrecondition NEEDS_RECOVERY", i+1, r.err)
				}
			}
			if n := w.pay.calls.Load() - before; n != 1 {
				t.Errorf("the handler (a charge at the channel) ran %d times under one key; want 1", n)
			}
			var row struct {
				State          string
				Held           bool
				NeedsAttention bool
			}
			w.db.Raw(`SELECT state, held, needs_attention FROM idempotency_keys WHERE key = ?`, key[0]).Scan(&row)
			if row.State != "failed_retryable" || !row.Held || !row.NeedsAttention {
				t.Errorf("key after an unknown outcome: %+v; want held failed_retryable, needing attention", row)
			}
		})
	}
}

// TestGRPC_HeldPlainKeyRunsAgainOnlyAfterAnOperatorReleasesIt: an operator who checked the
// channel releases the held key for retry (audited in the console), and only then does the next
// retry run the handler; marking it final instead answers the final failure to every retry.
func TestGRPC_HeldPlainKeyRunsAgainOnlyAfterAnOperatorReleasesIt(t *testing.T) {
	w := newWorld(t, plainMethod)
	store, err := claim.NewStore(w.db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	flaky := pay
	flaky.Outcome = "flaky" // Unavailable the first time only
	held := func(key string) *claim.Key {
		t.Helper()
		w.pay.flakes.Store(0)
		if r := w.call(w.conn, "tok-a", []string{key}, flaky); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("first attempt: %v", r.err)
		}
		var id int64
		w.db.Raw(`SELECT id FROM idempotency_keys WHERE key = ?`, key).Scan(&id)
		k, err := store.Get(ctx, id)
		if err != nil || !k.Held {
			t.Fatalf("key %s not held: %+v %v", key, k, err)
		}
		return k
	}

	k := held("k-release")
	wantStatus(t, w.call(w.conn, "tok-a", []string{"k-release"}, flaky), codes.FailedPrecondition, grpcidem.ReasonNeedsRecovery)
	if err := keys.ReleaseForRetry(ctx, store, nil, k.ID, k.Version, "operator:alice", "the channel has no such charge"); err != nil {
		t.Fatal(err)
	}
	r := w.call(w.conn, "tok-a", []string{"k-release"}, flaky)
	if r.err != nil || r.replayed() {
		t.Fatalf("retry after the release: %v", r.err)
	}
	if again := w.call(w.conn, "tok-a", []string{"k-release"}, flaky); again.err != nil || !again.replayed() || again.reply.PaymentID != r.reply.PaymentID {
		t.Fatalf("replay after the release: %+v %v", again.reply, again.err)
	}
	if n := w.pay.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times; want 2 (the first attempt, then once after the release)", n)
	}

	k = held("k-final")
	if err := keys.MarkFinal(ctx, store, nil, k.ID, k.Version, "operator:alice", "the channel charged; refunded by hand"); err != nil {
		t.Fatal(err)
	}
	// The stored "outcome unknown" answer is now final: replayed, never run again.
	if r := w.call(w.conn, "tok-a", []string{"k-final"}, flaky); status.Code(r.err) != codes.FailedPrecondition || !r.replayed() {
		t.Fatalf("after mark final: %v, replayed %v", r.err, r.replayed())
	}
	if n := w.pay.calls.Load(); n != 3 {
		t.Fatalf("handler ran %d times; want 3", n)
	}
}

// TestGRPC_PlainHandlerCrashedMidCallIsHeldNotRun: a retry that finds the first attempt's lease
// lapsed (its process died mid-call) holds the key and answers NEEDS_RECOVERY; the handler does
// not run again.
func TestGRPC_PlainHandlerCrashedMidCallIsHeldNotRun(t *testing.T) {
	w := newWorld(t, plainMethod)
	store, err := claim.NewStore(w.db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret")})
	if err != nil {
		t.Fatal(err)
	}
	intent, _ := json.Marshal(pay)
	out, err := store.Claim(context.Background(), claim.Request{Tenant: "tenant-a", Operation: "payment.charge", Key: "k-crash",
		Intent: intent, Spec: claim.IntentSpec{Ignore: []string{"description"}, AmountField: "amount_minor", CurrencyField: "currency"}})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", out, err)
	}
	pgtest.Exec(t, w.db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 second' WHERE id = ?`, out.KeyID)
	for range 3 {
		wantStatus(t, w.call(w.conn, "tok-a", []string{"k-crash"}, pay), codes.FailedPrecondition, grpcidem.ReasonNeedsRecovery)
	}
	var row struct {
		State string
		Held  bool
	}
	w.db.Raw(`SELECT state, held FROM idempotency_keys WHERE id = ?`, out.KeyID).Scan(&row)
	if n := w.pay.calls.Load(); n != 0 || row.State != "failed_retryable" || !row.Held {
		t.Fatalf("handler ran %d times, key %+v; want 0 runs and a held key", n, row)
	}
}
