package retention_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/retention"
)

// signalHandler is a slog handler that closes a channel the first time a message containing
// match is logged: tests wait on it instead of sleeping.
type signalHandler struct {
	match string
	once  *sync.Once
	ch    chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

func TestPurge_BatchShrinksAfterTimeoutsThenFinishes(t *testing.T) {
	shrunk := make(chan struct{})
	b := setup(t, func(c *retention.Config) {
		c.BatchSize, c.MinBatchSize, c.ShrinkAfter, c.MaxTimeouts = 800, 100, 2, 50
		c.StatementTimeout = 50 * time.Millisecond
		c.Logger = slog.New(signalHandler{match: "shrinking", once: &sync.Once{}, ch: shrunk})
	})
	seedExpired(t, b.db, "payment.charge", 1000, 1, 40*day)
	// An operator editing the settings holds their row: every batch waits for it until its
	// lock timeout, which the purge treats like a statement timeout.
	blocker := b.db.Begin()
	if err := blocker.Exec(`SELECT 1 FROM retention_settings FOR UPDATE`).Error; err != nil {
		t.Fatal(err)
	}
	go func() {
		<-shrunk
		blocker.Rollback()
	}()

	rep := b.purge(retention.Options{})

	if rep.Timeouts < 2 || rep.BatchSize >= 800 || rep.BatchSize < 100 {
		t.Errorf("timeouts %d, batch %d; want >= 2 timeouts and a batch halved from 800", rep.Timeouts, rep.BatchSize)
	}
	if rep.Deleted != 1000 || !rep.Complete {
		t.Errorf("deleted %d (complete %v), want all 1000 once the lock went", rep.Deleted, rep.Complete)
	}
}

func TestPurge_GivesUpAfterTooManyTimeoutsAtTheSmallestBatch(t *testing.T) {
	b := setup(t, func(c *retention.Config) {
		c.BatchSize, c.MinBatchSize, c.ShrinkAfter, c.MaxTimeouts = 800, 100, 2, 7
		c.StatementTimeout = 20 * time.Millisecond
	})
	seedExpired(t, b.db, "payment.charge", 10, 0, 40*day)
	blocker := b.db.Begin()
	defer blocker.Rollback()
	if err := blocker.Exec(`SELECT 1 FROM retention_settings FOR UPDATE`).Error; err != nil {
		t.Fatal(err)
	}

	rep, err := b.job.Purge(b.ctx, retention.Options{Actor: "operator:test"}, nil)

	if !errors.Is(err, retention.ErrTooManyTimeouts) {
		t.Fatalf("got %v, want ErrTooManyTimeouts", err)
	}
	// 800 → 400 → 200 → 100 after timeouts 2, 4, 6; the 7th gives up.
	if rep.Timeouts != 7 || rep.BatchSize != 100 || rep.Deleted != 0 {
		t.Errorf("timeouts %d, batch %d, deleted %d; want 7, 100, 0", rep.Timeouts, rep.BatchSize, rep.Deleted)
	}
	runs, err := retention.PurgeHistory(b.ctx, b.db, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Status != "failed" || !strings.Contains(runs[0].Error, "timing out") || runs[0].BatchSize != 100 {
		t.Errorf("purge log: %+v", runs[0])
	}
}

func TestPurge_TinyStatementTimeoutShrinksTheBatch(t *testing.T) {
	b := setup(t, func(c *retention.Config) {
		c.BatchSize, c.MinBatchSize, c.ShrinkAfter, c.MaxTimeouts = 8000, 1000, 2, 7
		c.StatementTimeout = time.Millisecond
	})
	seedExpired(t, b.db, "payment.charge", 20000, 0, 40*day)

	rep, err := b.job.Purge(b.ctx, retention.Options{Actor: "operator:test"}, nil)

	// A 1 ms budget cannot fit a batch of thousands: the run either gives up at the smallest
	// batch or squeezes through with it; either way the batch shrank on statement timeouts.
	if err != nil && !errors.Is(err, retention.ErrTooManyTimeouts) {
		t.Fatal(err)
	}
	if rep.Timeouts < 2 || rep.BatchSize >= 8000 {
		t.Errorf("timeouts %d, batch %d; want the batch shrunk from 8000", rep.Timeouts, rep.BatchSize)
	}
}

func TestPurge_WhileClaimingLosesNothingInPlay(t *testing.T) {
	b := setup(t, func(c *retention.Config) {
		c.BatchSize, c.PauseMin, c.PauseMax = 200, time.Millisecond, 3*time.Millisecond
	})
	seedExpired(t, b.db, "bulk.import", 3000, 2, 40*day)
	const late = 10
	for i := range late {
		b.age(b.key("payment.charge", fmt.Sprintf("late-%d", i), claim.StateCompleted), 4*day)
	}
	// In play across the whole purge: a fresh claim, and an old failed key being retried.
	held := b.claimKey("payment.charge", "held")
	retried := b.key("payment.charge", "retried", claim.StateFailedRetryable)
	b.age(retried, 40*day)
	out, err := b.store.Claim(b.ctx, request("payment.charge", "retried"))
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("retry: %+v %v", out, err)
	}
	retriedLease := out.Lease

	ctx, stop := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	var completed atomic.Int64
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 2000; i++ {
				if err := claimAndComplete(b, fmt.Sprintf("live-%d-%d", g, i)); err != nil {
					errs <- err
					return
				}
				completed.Add(1)
				out, err := b.store.Claim(b.ctx, request("payment.charge", fmt.Sprintf("late-%d", i%late)))
				if err != nil || out.Kind != claim.Expired {
					errs <- fmt.Errorf("late retry: %+v, %v; want expired", out, err)
					return
				}
			}
		})
	}
	rep, err := b.job.Purge(b.ctx, retention.Options{Actor: "operator:test"}, nil)
	stop()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err != nil {
		t.Fatal(err)
	}

	if rep.Deleted != 3000 || rep.Tombstoned != late {
		t.Errorf("deleted %d, tombstoned %d; want 3000, %d", rep.Deleted, rep.Tombstoned, late)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE key LIKE 'live-%' AND state = 'completed'`); n != completed.Load() || n == 0 {
		t.Errorf("%d live keys left, %d were completed", n, completed.Load())
	}
	for _, l := range []*claim.Lease{held, retriedLease} {
		if err := b.store.Complete(b.ctx, nil, l, &claim.Snapshot{Status: 201, ResourceID: "r"}); err != nil {
			t.Errorf("a key in play lost its lease to the purge: %v", err)
		}
	}
}

func claimAndComplete(b *bundle, key string) error {
	out, err := b.store.Claim(b.ctx, request("payment.charge", key))
	if err != nil {
		return err
	}
	if out.Kind != claim.Acquired {
		return fmt.Errorf("claim %s: %s", key, out.Kind)
	}
	return b.store.Complete(b.ctx, nil, out.Lease, &claim.Snapshot{Status: 201, ResourceID: "r-" + key})
}
