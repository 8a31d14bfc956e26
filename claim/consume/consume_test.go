package consume_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim/consume"
)

func TestConsume_DuplicateDeliveriesHaveOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 25
	events := make([]event, n)
	for i := range events {
		events[i] = event{Tenant: "acme", OrderID: "ord-1", Amount: 500} // n messages, n message ids, one order
	}
	b.publish(events)
	c, err := consume.New(b.db, b.config(), writeEffect)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, b.url)
	waitStats(t, c, "every delivery settled", func(s consume.Stats) bool { return s.Processed+s.Duplicates == n })
	if got := b.count(`SELECT count(*) FROM effects`); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	if s := c.Stats(); s.Processed != 1 || s.Duplicates != n-1 {
		t.Fatalf("stats = %+v, want 1 processed, %d duplicates", s, n-1)
	}
	if got := b.count(`SELECT duplicates FROM consumed_messages WHERE consumer = 'fulfillment' AND business_key = 'ord-1' AND tenant = 'acme'`); got != n-1 {
		t.Fatalf("dedup row counts %d duplicates, want %d", got, n-1)
	}
}

func TestConsume_RolledBackBusinessTxLeavesNoDedupRowAndIsRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	failed := make(chan struct{})
	var redelivered atomic.Bool
	var leftBehind atomic.Int64 // dedup rows of ord-9 seen from outside when the redelivery is handled
	leftBehind.Store(-1)
	cfg := b.config()
	cfg.RetryDelay = 500 * time.Millisecond
	c, err := consume.New(b.db, cfg, func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
		if calls.Load() == 1 {
			// The redelivery, before its own effect: its dedup row is not committed yet, so any
			// row another connection sees is the rolled-back handling's. Read here, not after
			// the retry is counted: past RetryDelay the redelivery's own row may be committed.
			var n int64
			if err := b.db.Raw(`SELECT count(*) FROM consumed_messages WHERE business_key = 'ord-9'`).Scan(&n).Error; err != nil {
				return err
			}
			leftBehind.Store(n)
		}
		if err := writeEffect(ctx, tx, m); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			close(failed)
			return errors.New("downstream write refused") // rolls back the effect and the dedup row
		}
		redelivered.Store(m.Redelivered)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, b.url)
	b.publish([]event{{Tenant: "acme", OrderID: "ord-9", Amount: 100}})
	<-failed
	// The failed handling rolled back (counted as retried); it is handed back only after RetryDelay.
	waitStats(t, c, "the failed handling rolled back", func(s consume.Stats) bool { return s.Retried == 1 })
	waitStats(t, c, "the redelivery processed", func(s consume.Stats) bool { return s.Processed == 1 })
	if n := leftBehind.Load(); n != 0 {
		t.Fatalf("a rolled-back business transaction left %d dedup rows (-1: not read)", n)
	}
	if !redelivered.Load() {
		t.Fatal("the second handling was not a redelivery")
	}
	if got := b.count(`SELECT count(*) FROM effects WHERE order_id = 'ord-9'`); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	if s := c.Stats(); s.Retried != 1 || s.Duplicates != 0 {
		t.Fatalf("stats = %+v, want 1 retried, no duplicates", s)
	}
}

func TestConsume_KilledAfterCommitBeforeAckDropsTheRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn1, err := amqp.Dial(b.url)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	c, err := consume.New(b.db, b.config(), func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
		if calls.Add(1) == 1 {
			// The consumer "dies": its connection goes before the transaction commits, so the
			// commit succeeds and the ack never reaches the broker.
			_ = conn1.Close()
		}
		return writeEffect(ctx, tx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.publish([]event{{Tenant: "acme", OrderID: "ord-5", Amount: 700}})
	ch1, err := conn1.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background(), ch1); err == nil {
		t.Fatal("Run on the killed connection returned no error")
	}
	waitStats(t, c, "the commit of the first handling", func(s consume.Stats) bool { return s.Processed == 1 })
	if s := c.Stats(); s.AckErrors != 1 {
		t.Fatalf("stats = %+v, want the ack lost", s)
	}
	serve(t, c, b.url) // the restarted consumer gets the redelivery
	waitStats(t, c, "the redelivery dropped", func(s consume.Stats) bool { return s.Duplicates == 1 })
	if got := b.count(`SELECT count(*) FROM effects WHERE order_id = 'ord-5'`); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	if calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", calls.Load())
	}
}

func TestConsume_MessageWithoutBusinessKeyIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := consume.New(b.db, b.config(), writeEffect)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, b.url)
	b.publish([]event{{Tenant: "acme"}, {Tenant: "acme", OrderID: "ord-2", Amount: 1}})
	waitStats(t, c, "both settled", func(s consume.Stats) bool { return s.Invalid == 1 && s.Processed == 1 })
	if got := b.count(`SELECT count(*) FROM effects`); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
}

func TestConsume_ConfigIsValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  consume.Config
		want string
	}{
		{consume.Config{Queue: "q", BusinessKey: byOrderID}, "Consumer"},
		{consume.Config{Consumer: "c", BusinessKey: byOrderID}, "Queue"},
		{consume.Config{Consumer: "c", Queue: "q"}, "BusinessKey"},
		{consume.Config{Consumer: "c", Queue: "q", BusinessKey: byOrderID, Prefetch: 5000}, "Prefetch"},
		{consume.Config{Consumer: "c", Queue: "q", BusinessKey: byOrderID, Prefetch: 2, Workers: 3}, "Workers"},
	} {
		_, err := consume.New(&gorm.DB{}, tc.cfg, writeEffect)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestConsume_FailureInABatchHandsBackOnlyTheFailingMessage: deliveries that share a
// transaction are handled one by one when one of them fails, so the others commit and at most
// the failing one is handed back — every order has exactly one effect.
func TestConsume_FailureInABatchHandsBackOnlyTheFailingMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var failed atomic.Bool
	const n = 40
	events := make([]event, n)
	for i := range events {
		events[i] = event{Tenant: "acme", OrderID: fmt.Sprintf("ord-%02d", i), Amount: int64(i)}
	}
	b.publish(events) // before the consumer starts: they wait together and form batches
	c, err := consume.New(b.db, b.config(), func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
		if strings.Contains(string(m.Body), `"ord-17"`) && failed.CompareAndSwap(false, true) {
			return errors.New("refused once")
		}
		return writeEffect(ctx, tx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, b.url)
	waitStats(t, c, "every order processed", func(s consume.Stats) bool { return s.Processed == n })
	if got := b.count(`SELECT count(*) FROM effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
	if got := b.count(`SELECT count(DISTINCT order_id) FROM effects`); got != n {
		t.Fatalf("distinct effects = %d, want %d", got, n)
	}
	if s := c.Stats(); !failed.Load() || s.Retried > 1 || s.Duplicates != 0 || s.Batches == 0 {
		t.Fatalf("stats = %+v (failed once: %v), want at most 1 retried, no duplicates, some batches", s, failed.Load())
	}
}
