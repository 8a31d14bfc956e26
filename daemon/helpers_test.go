package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/daemon/internal/testsignal"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open opens a handle of its own on url (a "process" of its own), closed at cleanup.
func open(t testing.TB, url string) *gorm.DB { return pgtest.Open(t, url) }

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// newStore is a claim store with test-sized timings.
func newStore(t testing.TB, db *gorm.DB, owner string, tune func(*claim.Config)) *claim.Store {
	t.Helper()
	cfg := claim.Config{Owner: owner, LeaseTTL: time.Second, Quarantine: 50 * time.Millisecond,
		LookupBackoff: 10 * time.Millisecond, LookupAttempts: 3, DigestSecret: []byte("0123456789abcdef-test"), Logger: quiet}
	if tune != nil {
		tune(&cfg)
	}
	s, err := claim.NewStore(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newDaemon is a daemon with test-sized timings (TTL 1 s, renewal every 250 ms).
func newDaemon(t testing.TB, db *gorm.DB, name string, tune func(*daemon.Config)) *daemon.Daemon {
	t.Helper()
	cfg := daemon.Config{DB: db, Name: name, LeaseTTL: time.Second, RenewEvery: 250 * time.Millisecond,
		PollEvery: 20 * time.Millisecond, ShutdownTimeout: 2 * time.Second, ProgressEvery: 10 * time.Millisecond, Logger: quiet}
	if tune != nil {
		tune(&cfg)
	}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.TestSignals() // on before Start: tests wait on them instead of polling
	return d
}

// waitPolls waits for n scheduler polls of d after the ones already signalled: time for the
// scheduler to have acted on what the test just changed, paced by the scheduler itself.
func waitPolls(t testing.TB, d *daemon.Daemon, n int) {
	t.Helper()
	polled := &d.TestSignals().Polled
	polled.Drain()
	for range n {
		polled.Wait(t, 2*time.Second)
	}
}

// passUntil runs pass, then again each time the rows of the outbox are due again (their next
// attempt, written by the relay), until done holds; at most max passes.
func passUntil(t testing.TB, db *gorm.DB, max int, what string, pass func(), done func() bool) {
	t.Helper()
	for i := 0; ; i++ {
		pass()
		if done() {
			return
		}
		if i == max {
			t.Fatalf("%s: not done after %d passes", what, max)
		}
		pgtest.SleepUntil(t, db, `SELECT min(next_attempt_at) FROM outbox WHERE state IN ('pending', 'sending')`)
	}
}

// fakeOp is an Operation whose downstream is a map. Lookup answers from behaviour(downstream
// key); Apply counts applications per key.
type fakeOp struct {
	name      string
	behaviour func(l *claim.Lease) (*claim.Document, error)
	delay     time.Duration
	redrive   bool

	lookups atomic.Int64
	looked  testsignal.Signal[int64] // each lookup, with the count so far, once a test Inits it
	mu      sync.Mutex
	applied map[int64]int
	exec    map[int64]int
}

func newFakeOp(name string, behaviour func(l *claim.Lease) (*claim.Document, error)) *fakeOp {
	return &fakeOp{name: name, behaviour: behaviour, applied: map[int64]int{}, exec: map[int64]int{}}
}

func found(l *claim.Lease) (*claim.Document, error) {
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:8], Body: json.RawMessage(`{"status":"succeeded"}`)}, nil
}

func (o *fakeOp) Name() string { return o.name }
func (o *fakeOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency"}
}
func (o *fakeOp) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	o.mu.Lock()
	o.exec[l.KeyID]++
	o.mu.Unlock()
	return found(l)
}
func (o *fakeOp) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	o.looked.Signal(o.lookups.Add(1))
	if o.delay > 0 {
		select {
		case <-time.After(o.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return o.behaviour(l)
}
func (o *fakeOp) Apply(_ context.Context, _ *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	o.mu.Lock()
	o.applied[l.KeyID]++
	o.mu.Unlock()
	return &claim.Snapshot{Status: 201, Body: []byte(`{"id":"` + doc.ResourceID + `"}`), ResourceID: doc.ResourceID}, nil
}

func (o *fakeOp) appliedTo(id int64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.applied[id]
}

// redriveOp opts into redrive.
type redriveOp struct{ *fakeOp }

func (redriveOp) Redrive() bool { return true }

// ops is an Operations over a fixed set.
type ops map[string]claim.Operation

func (m ops) Get(name string) (claim.Operation, bool) { op, ok := m[name]; return op, ok }

// seedExpired claims n keys of op and ages their leases (test set-up only), returning their ids.
func seedExpired(t testing.TB, s *claim.Store, op string, prefix string, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := s.Claim(context.Background(), claim.Request{Tenant: "t1", Operation: op,
				Key: fmt.Sprintf("%s-%d", prefix, i), Intent: json.RawMessage(`{"amount":100,"currency":"CNY"}`)})
			if err != nil {
				errs <- err
				return
			}
			if out.Kind != claim.Acquired {
				errs <- fmt.Errorf("seed claim %d: %s", i, out.Kind)
				return
			}
			ids[i] = out.KeyID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pgtest.Exec(t, s.DB(), `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id IN ?`, ids)
	return ids
}

// eventCounts counts events of kind per key among ids.
func eventCounts(t testing.TB, db *gorm.DB, ids []int64, kind string) map[int64]int {
	t.Helper()
	var rows []struct {
		KeyID int64
		N     int
	}
	if err := db.Raw(`SELECT key_id, count(*) AS n FROM key_history WHERE key_id IN ? AND kind = ? GROUP BY key_id`,
		ids, kind).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[int64]int{}
	for _, r := range rows {
		out[r.KeyID] = r.N
	}
	return out
}

func stateCounts(t testing.TB, db *gorm.DB, ids []int64) map[string]int {
	t.Helper()
	var rows []struct {
		State string
		N     int
	}
	if err := db.Raw(`SELECT state, count(*) AS n FROM idempotency_keys WHERE id IN ? GROUP BY state`, ids).
		Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out
}

// countingJob counts its runs; each run does batches of work until done or asked to stop.
type countingJob struct {
	name    string
	runs    atomic.Int64
	batches int           // batches per run (0: one)
	batch   time.Duration // how long a batch takes
	fail    error

	finishedBatches atomic.Int64
	startedBatches  atomic.Int64
	// batchStarted and batchFinished signal each batch (with its count) once a test Inits them.
	batchStarted, batchFinished testsignal.Signal[int64]
}

func (j *countingJob) Name() string { return j.name }
func (j *countingJob) RunOnce(ctx context.Context, _ []byte, p daemon.Progress) (daemon.Stats, error) {
	j.runs.Add(1)
	stats := daemon.Stats{"batches": 0}
	n := max(j.batches, 1)
	for i := range n {
		if daemon.ShouldStop(ctx) {
			if ctx.Err() != nil {
				return stats, ctx.Err()
			}
			return stats, daemon.ErrStopped
		}
		j.batchStarted.Signal(j.startedBatches.Add(1))
		select {
		case <-time.After(j.batch):
		case <-ctx.Done():
			return stats, ctx.Err()
		}
		j.batchFinished.Signal(j.finishedBatches.Add(1))
		stats["batches"]++
		p.Report("work", int64(i+1), int64(n))
	}
	return stats, j.fail
}
