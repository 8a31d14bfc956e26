package grpcidem_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
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
