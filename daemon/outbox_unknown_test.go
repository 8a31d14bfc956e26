package daemon_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// lateDownstream has no idempotency and is slow: it never answers a send within the relay's
// timeout, and acts on it `late` after that timeout all the same (a server finishing a request
// its client gave up on). Lookup sees only what it has acted on.
type lateDownstream struct {
	late       time.Duration
	mu         sync.Mutex
	sends      int
	deliveries map[string]int
	acting     sync.WaitGroup
}

func (d *lateDownstream) Send(ctx context.Context, key string, _ []byte) error {
	d.mu.Lock()
	d.sends++
	d.mu.Unlock()
	<-ctx.Done()
	d.acting.Add(1)
	time.AfterFunc(d.late, func() {
		d.mu.Lock()
		d.deliveries[key]++
		d.mu.Unlock()
		d.acting.Done()
	})
	return ctx.Err()
}

func (d *lateDownstream) Lookup(_ context.Context, key string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deliveries[key] > 0, nil
}

// TestOutbox_SendWithUnknownOutcomeIsResentOnlyAfterTwoNotFoundsAQuarantineApart: a send that
// timed out has an unknown outcome. A downstream without idempotency that acts 2 s after the
// timeout must not get the message again on the first "not found": only a second not-found a
// quarantine after the first proves the first send never arrived.
func TestOutbox_SendWithUnknownOutcomeIsResentOnlyAfterTwoNotFoundsAQuarantineApart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-late")
	down := &lateDownstream{late: 2 * time.Second, deliveries: map[string]int{}}
	r := newRelay(t, db, down, func(c *daemon.OutboxConfig) {
		c.SendTimeout, c.SendLease = 200*time.Millisecond, 400*time.Millisecond
		c.BaseBackoff, c.MaxBackoff, c.MaxAttempts = 50*time.Millisecond, 400*time.Millisecond, 50
		c.Quarantine = 3 * time.Second // longer than downstream's 2 s lag
	})
	passUntil(t, db, 100, "the row sent", func() {
		if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return outboxRow(t, db).State == "sent"
	})
	down.acting.Wait() // every send that reached downstream has acted
	down.mu.Lock()
	defer down.mu.Unlock()
	if n := down.deliveries["dk-late"]; n != 1 {
		t.Fatalf("downstream acted %d times on one message (%d sends); want 1", n, down.sends)
	}
}

// gatedDownstream has no idempotency; the first send of gateKey blocks until gate is closed
// (a slow send that outlives its claim), and every send is delivered when it returns.
type gatedDownstream struct {
	gateKey    string
	gate       chan struct{}
	arrived    chan struct{}
	mu         sync.Mutex
	gated      bool
	deliveries map[string]int
}

func (d *gatedDownstream) Send(_ context.Context, key string, _ []byte) error {
	d.mu.Lock()
	first := key == d.gateKey && !d.gated
	d.gated = d.gated || first
	d.mu.Unlock()
	if first {
		close(d.arrived)
		<-d.gate
	}
	d.mu.Lock()
	d.deliveries[key]++
	d.mu.Unlock()
	return nil
}

func (d *gatedDownstream) Lookup(_ context.Context, key string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deliveries[key] > 0, nil
}

// TestOutbox_TwoOverlappingRunsOverOneSlowBatchDeliverEachOnce: run A claims a batch and is stuck
// in its first send; the rows waiting behind it outlive their send lease, and run B (a deposed
// leader's, a manual `jobs run outbox`, overlapping schedules) claims them and sends. A's later
// sends are fenced on its claim: a run whose claim lapsed sends nothing, so every message reaches
// the downstream once.
func TestOutbox_TwoOverlappingRunsOverOneSlowBatchDeliverEachOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	keys := []string{"dk-1", "dk-2", "dk-3"}
	for _, k := range keys {
		enqueue(t, db, k)
	}
	down := &gatedDownstream{gateKey: "dk-1", gate: make(chan struct{}), arrived: make(chan struct{}), deliveries: map[string]int{}}
	tune := func(c *daemon.OutboxConfig) {
		c.Workers, c.BatchSize = 1, 10
		c.SendTimeout, c.SendLease, c.Quarantine = 100*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond
	}
	runA := newRelay(t, open(t, url), down, tune)
	runB := newRelay(t, open(t, url), down, tune)

	aDone := make(chan error, 1)
	go func() {
		_, err := runA.RunOnce(context.Background(), nil, daemon.NopProgress{})
		aDone <- err
	}()
	<-down.arrived // A is inside its first send
	// A's claims lapse at their send lease's end, written on the rows.
	pgtest.SleepUntil(t, db, `SELECT max(next_attempt_at) FROM outbox WHERE state = 'sending'`)
	var lapsed int64
	db.Raw(`SELECT count(*) FROM outbox WHERE state = 'sending' AND next_attempt_at < now()`).Scan(&lapsed)
	if lapsed != int64(len(keys)) {
		t.Fatalf("%d of A's %d claims lapsed", lapsed, len(keys))
	}
	if _, err := runB.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}
	close(down.gate)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	passUntil(t, db, 100, "every row sent", func() {
		if _, err := runB.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		var n int64
		db.Raw(`SELECT count(*) FROM outbox WHERE state <> 'sent'`).Scan(&n)
		return n == 0
	})
	down.mu.Lock()
	defer down.mu.Unlock()
	for _, k := range keys {
		if n := down.deliveries[k]; n != 1 {
			t.Errorf("%s delivered %d times; want 1", k, n)
		}
	}
}

// blindDownstream fails its sends (a timeout: the outcome is unknown) and cannot answer lookups.
type blindDownstream struct {
	mu             sync.Mutex
	sends, lookups int
}

func (d *blindDownstream) Send(context.Context, string, []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sends++
	return context.DeadlineExceeded
}

func (d *blindDownstream) Lookup(context.Context, string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	return false, errors.New("lookup: 503 service unavailable")
}

// TestOutbox_LookupErrorNeverLeadsToASend: after a send with an unknown outcome, a downstream
// that cannot answer its lookup is never sent the message again; the row fails after its
// attempts, visible for an operator, with the lookup's error.
func TestOutbox_LookupErrorNeverLeadsToASend(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-blind")
	down := &blindDownstream{}
	r := newRelay(t, db, down, func(c *daemon.OutboxConfig) { c.MaxAttempts, c.Quarantine = 5, 10*time.Millisecond })
	passUntil(t, db, 100, "the row failed", func() {
		if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return outboxRow(t, db).State == "failed"
	})
	down.mu.Lock()
	defer down.mu.Unlock()
	if row := outboxRow(t, db); down.sends != 1 || down.lookups != 4 || row.LastError == nil || !strings.Contains(*row.LastError, "lookup") {
		t.Fatalf("sends %d, lookups %d, row %+v; want one send, then only lookups", down.sends, down.lookups, row)
	}
}
