package consume_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
)

// buggyShipping is the remote part whose Execute has a bug: an index out of range after the
// remote call went out.
type buggyShipping struct{ *shipping }

func (s buggyShipping) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	if _, err := s.shipping.Execute(ctx, l); err != nil {
		return nil, err
	}
	_ = l.DownstreamKey[:len(l.DownstreamKey)+1]
	return nil, nil
}

// TestSpanning_PanickingOperationIsRecoveredAndTheKeyHeld: a panic in a spanning consumer's
// operation is recovered in the consumer's worker: the consumer stays up, the remote call (which
// went out) is never made again, and the key is held for an operator; the redelivery is dropped.
func TestSpanning_PanickingOperationIsRecoveredAndTheKeyHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, ship := b.spanning()
	cfg := b.config()
	cfg.Consumer = "shipper"
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := consume.NewSpanning(store, cfg, consume.Recorded("shipper", buggyShipping{ship}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, b.url)
	b.publish([]event{{Tenant: "acme", OrderID: "ord-9", Amount: 900}})
	waitStats(t, c, "the redelivery dropped", func(s consume.Stats) bool { return s.Duplicates >= 1 })
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'fulfillment.ship' AND held`); n != 1 {
		t.Fatalf("held keys = %d; want 1", n)
	}
	if n := ship.executed.Load(); n != 1 {
		t.Fatalf("remote executions = %d; want 1", n)
	}
}
