package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/replay"
)

var testSecret = []byte("replay-test-digest-secret-0123")

// childDB names the database a re-executed test binary runs a daemon replica on (bulkChild).
const childDB = "IDEMOPS_REPLAY_TEST_CHILD_DB"

func TestMain(m *testing.M) {
	if url := os.Getenv(childDB); url != "" {
		bulkChild(url)
		return
	}
	pgtest.Main(m)
}

// slowCharge is a payment operation whose channel never has the charge (every lookup says not
// found) and whose charge takes a while, so that a kill lands in the middle of a bulk replay.
type slowCharge struct{ took time.Duration }

func (slowCharge) Name() string { return "payment.charge" }
func (slowCharge) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency"}
}
func (o slowCharge) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	select {
	case <-time.After(o.took):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:8]}, nil
}
func (slowCharge) Lookup(context.Context, *claim.Lease) (*claim.Document, error) { return nil, nil }
func (slowCharge) Apply(_ context.Context, _ *gorm.DB, _ *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return &claim.Snapshot{Status: 201, Body: []byte(`{"charge":"` + doc.ResourceID + `"}`), ResourceID: doc.ResourceID}, nil
}

func operations(name string) (claim.Operation, bool) {
	return slowCharge{took: 300 * time.Millisecond}, name == "payment.charge"
}

// newWorkflow is the replay workflow over db as a daemon or console process makes it.
func newWorkflow(t testing.TB, db *gorm.DB) (*claim.Store, *replay.Workflow) {
	return newWorkflowOps(t, db, operations)
}

// newWorkflowOps is newWorkflow over the operations ops.
func newWorkflowOps(t testing.TB, db *gorm.DB, ops func(string) (claim.Operation, bool)) (*claim.Store, *replay.Workflow) {
	st, err := claim.NewStore(db, claim.Config{DigestSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	w, err := replay.New(replay.Config{DB: db, Claims: st, Operations: ops,
		Audit: audit.New(db, testSecret), ApprovalAbove: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return st, w
}

// newReplica is a daemon replica over db that runs the bulk replay job on w.
func newReplica(t testing.TB, db *gorm.DB, name string, w *replay.Workflow) *daemon.Daemon {
	d, err := daemon.New(daemon.Config{DB: db, Name: name, LeaseTTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond,
		PollEvery: 50 * time.Millisecond, ShutdownTimeout: 2 * time.Second, ProgressEvery: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(replay.NewBulkJob(w), replay.BulkJobSpec); err != nil {
		t.Fatal(err)
	}
	return d
}

// childT is the testing.TB of the re-executed binary: a failure ends the process.
type childT struct{ testing.TB }

func (childT) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(3) }

// bulkChild runs a daemon replica with the bulk replay job until it is killed.
func bulkChild(url string) {
	db, err := pgpool.Open(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	_, w := newWorkflow(childT{}, db)
	d := newReplica(childT{}, db, "child", w)
	if err := d.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	select {}
}

type fixture struct {
	t      *testing.T
	db     *gorm.DB
	url    string
	claims *claim.Store
	w      *replay.Workflow
	actor  replay.Actor
}

func newFixture(t *testing.T) *fixture { return newFixtureOps(t, operations) }

// newFixtureOps is newFixture whose workflow finds operations in ops.
func newFixtureOps(t *testing.T, ops func(string) (claim.Operation, bool)) *fixture {
	url := pgtest.URL(t)
	db := pgtest.Open(t, url)
	st, w := newWorkflowOps(t, db, ops)
	t.Cleanup(w.Close)
	op, err := access.NewOperators(db, access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, testSecret)).Add(context.Background(),
		access.Change{Actor: "test"}, access.NewOperator{Name: "olga", Password: "correct horse battery", Role: access.RoleOperator,
			Tenants: []string{"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, url: url, claims: st, w: w,
		actor: replay.Actor{ID: op.ID, Name: op.Name, Tenants: op.Tenants, IP: "127.0.0.1"}}
}

// seedProvenAbsent makes n failed_retryable charges whose channel said not found an hour ago:
// a replay of each one looks downstream up once more and then charges.
func (f *fixture) seedProvenAbsent(n int) []claim.Key {
	ctx := context.Background()
	var keys []claim.Key
	for i := range n {
		out, err := f.claims.Claim(ctx, claim.Request{Tenant: "acme", Operation: "payment.charge", Key: fmt.Sprintf("bulk-%02d", i),
			Intent: json.RawMessage(fmt.Sprintf(`{"amount":%d,"currency":"USD"}`, 100+i)), Spec: slowCharge{}.Intent(), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			f.t.Fatalf("seed %d: %v %v", i, out, err)
		}
		if err := f.claims.Fail(ctx, nil, out.Lease, claim.RetryableFailure("timeout", "no answer from the channel")); err != nil {
			f.t.Fatal(err)
		}
		pgtest.Exec(f.t, f.db, `UPDATE idempotency_keys SET not_found_at = now() - interval '1 hour' WHERE id = ?`, out.KeyID)
		k, err := f.claims.Get(ctx, out.KeyID)
		if err != nil {
			f.t.Fatal(err)
		}
		keys = append(keys, *k)
	}
	return keys
}

// start previews a bulk replay of keys and starts it.
func (f *fixture) start(keys []claim.Key) *replay.BulkRun {
	ctx := context.Background()
	plan, err := f.w.PreviewBulk(ctx, f.actor, replay.BulkSelection{Filter: "tenant=acme", Selected: true, Keys: keys})
	if err != nil {
		f.t.Fatal(err)
	}
	if plan.Counts.ByOutcome[string(replay.PredictSend)] != len(keys) {
		f.t.Fatalf("preview: %+v, want every key sent", plan.Counts)
	}
	run, err := f.w.StartBulk(ctx, f.actor, plan.Plan, plan.Token, "channel outage 10:00-10:20")
	if err != nil {
		f.t.Fatal(err)
	}
	return run
}

func (f *fixture) count(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	if err := f.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		f.t.Fatal(err)
	}
	return n
}

// waitFor waits until cond holds, re-checking it whenever one of tables changes (the state lives
// in another process, which writes it to the same database: pgtest.Await hears its commits).
func (f *fixture) waitFor(what string, limit time.Duration, cond func() bool, tables ...string) {
	f.t.Helper()
	pgtest.Await(f.t, f.db, limit, what, cond, tables...)
}

// TestBulkJob_KilledMidBulkIsFinishedByTheNextDaemonOncePerKey: a daemon process replaying a
// bulk run is killed (SIGKILL) in the middle; its job run stays running until a fresh daemon is
// elected and marks it abandoned; the fresh daemon then resumes the bulk run and finishes it.
// Every key's result is recorded exactly once, no key is charged twice (one takeover and at
// most one execution per key), and the run's end is audited once.
func TestBulkJob_KilledMidBulkIsFinishedByTheNextDaemonOncePerKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	keys := f.seedProvenAbsent(8)
	run := f.start(keys)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childDB+"="+f.url)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	t.Cleanup(func() { _ = child.Process.Kill() })
	f.waitFor("the child to replay 3 keys", 30*time.Second, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the child daemon exited early: %v", err)
		default:
		}
		return f.count(`SELECT processed FROM replay_bulk_runs WHERE id = ?`, run.ID) >= 3
	}, "replay_bulk_runs")
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	killedAt := f.count(`SELECT processed FROM replay_bulk_runs WHERE id = ?`, run.ID)
	if killedAt >= int64(len(keys)) {
		t.Fatalf("the child finished all %d keys before the kill; the test proves nothing", len(keys))
	}
	if n := f.count(`SELECT count(*) FROM replay_bulk_runs WHERE id = ? AND state = 'running'`, run.ID); n != 1 {
		t.Fatal("the killed run is not left running")
	}
	var childRun int64
	if err := f.db.Raw(`SELECT job_run_id FROM replay_bulk_runs WHERE id = ?`, run.ID).Scan(&childRun).Error; err != nil || childRun == 0 {
		t.Fatalf("the run does not name the job run working on it (%d, %v)", childRun, err)
	}
	if n := f.count(`SELECT count(*) FROM job_runs WHERE id = ? AND status = 'running'`, childRun); n != 1 {
		t.Fatal("the killed job run is not left running")
	}

	// A fresh daemon: elected once the child's lease lapses, it marks the child's run abandoned;
	// the next pass of the job (asked for at once, as the console's run-now button would; else
	// within BulkJobSpec) resumes the bulk run.
	fresh := newReplica(t, f.db, "fresh", f.w)
	if err := fresh.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Stop(context.Background()) })
	if err := daemon.RunNow(context.Background(), f.db, replay.BulkJobName); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the fresh daemon to finish the run and record its job run's end", 30*time.Second, func() bool {
		return f.count(`SELECT count(*) FROM replay_bulk_runs r JOIN job_runs j ON j.id = r.job_run_id
			WHERE r.id = ? AND r.state <> 'running' AND j.status <> 'running'`, run.ID) == 1
	}, "replay_bulk_runs", "job_runs")

	got, err := f.w.BulkRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var results map[string]int
	_ = json.Unmarshal(got.Results, &results)
	sum := 0
	for _, n := range results {
		sum += n
	}
	if got.State != "done" || got.Processed != len(keys) || sum != len(keys) {
		t.Errorf("run: state %s, processed %d, results %v; want done, %d", got.State, got.Processed, results, len(keys))
	}
	t.Logf("killed after %d of %d keys; results after the restart: %v", killedAt, len(keys), results)
	if got.JobRunID == nil || *got.JobRunID == childRun {
		t.Errorf("the run names job run %v, want the fresh daemon's", got.JobRunID)
	}
	if n := f.count(`SELECT count(*) FROM job_runs WHERE id = ? AND status = 'abandoned'`, childRun); n != 1 {
		t.Error("the killed job run is not marked abandoned")
	}
	if n := f.count(`SELECT count(*) FROM job_runs WHERE id = ? AND status = 'succeeded' AND (stats->>'resumed')::int = 1`, *got.JobRunID); n != 1 {
		t.Error("the fresh job run did not succeed resuming one run")
	}
	if n := f.count(`SELECT count(*) FROM replay_requests WHERE bulk_run_id = ? AND state IN ('approved', 'executing')`, run.ID); n != 0 {
		t.Errorf("%d replay requests of the run left unfinished", n)
	}
	if n := f.count(`SELECT count(*) FROM replay_bulk_items i JOIN replay_requests r ON r.id = i.request_id
		WHERE i.run_id = ? AND i.result <> r.outcome_kind`, run.ID); n != 0 {
		t.Errorf("%d keys' results differ from their requests' outcomes", n)
	}
	if n := f.count(`SELECT count(*) FROM replay_bulk_items WHERE run_id = ? AND (result IS NULL OR done_at IS NULL)`, run.ID); n != 0 {
		t.Errorf("%d keys without a result", n)
	}
	for _, k := range keys {
		takeovers := f.count(`SELECT count(*) FROM key_events WHERE key_id = ? AND kind = 'taken_over'`, k.ID)
		executions := f.count(`SELECT count(*) FROM key_events WHERE key_id = ? AND kind = 'executing'`, k.ID)
		requests := f.count(`SELECT count(*) FROM replay_requests WHERE key_id = ? AND bulk_run_id = ?`, k.ID, run.ID)
		if takeovers > 1 || executions > 1 || requests != 1 {
			t.Errorf("key %d: %d takeovers, %d executions, %d requests; want at most one each and one request", k.ID,
				takeovers, executions, requests)
		}
	}
	if n := f.count(`SELECT count(*) FROM key_history e JOIN replay_bulk_items i ON i.key_id = e.key_id
		WHERE i.run_id = ? AND e.kind = 'completed'`, run.ID); n < killedAt {
		t.Errorf("%d keys completed, want at least the %d the child finished", n, killedAt)
	}
	if n := f.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_done' AND target = ?`, fmt.Sprintf("bulk:%d", run.ID)); n != 1 {
		t.Errorf("bulk_done audited %d times, want once", n)
	}
}

// TestBulkJob_UnreadableItemsFinishTheRunFailedWithTheError: when a run's items cannot be read,
// the job finishes the run as failed with the error recorded (on the run and its job run)
// instead of leaving it running.
func TestBulkJob_UnreadableItemsFinishTheRunFailedWithTheError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run := f.start(f.seedProvenAbsent(2))
	pgtest.Exec(t, f.db, `ALTER TABLE replay_bulk_items RENAME TO replay_bulk_items_away`)
	d := newReplica(t, f.db, "cli", f.w)
	jr, err := d.RunJob(context.Background(), replay.BulkJobName)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, f.db, `ALTER TABLE replay_bulk_items_away RENAME TO replay_bulk_items`)
	got, err := f.w.BulkRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "failed" || got.Error == nil || got.FinishedAt == nil {
		t.Fatalf("run: state %s, error %v; want failed with the error", got.State, got.Error)
	}
	if jr.Status != daemon.RunFailed || jr.Error == "" {
		t.Errorf("job run: %s %q, want failed with the error", jr.Status, jr.Error)
	}
	if n := f.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_done' AND target = ? AND detail::jsonb->>'state' = 'failed'`,
		fmt.Sprintf("bulk:%d", run.ID)); n != 1 {
		t.Errorf("failed end audited %d times, want once", n)
	}
	if n := f.count(`SELECT count(*) FROM key_events WHERE kind = 'taken_over'`); n != 0 {
		t.Errorf("%d keys taken over by a run that could not read its keys", n)
	}
}

// TestBulkJob_ParkedKeysWaitForTheirRecheckAndAreReplayedThen: a bulk run whose keys downstream
// has not found yet parks them for the quarantine; the run is not done but waiting, each key
// with the time of its next check (its lease's end); a pass before then takes nothing; the pass
// after it looks again (audited replay.recheck), replays the keys — now not found twice, so
// charged once each — and only then is the run done.
func TestBulkJob_ParkedKeysWaitForTheirRecheckAndAreReplayedThen(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	var keys []claim.Key
	for i := range 2 {
		out, err := f.claims.Claim(ctx, claim.Request{Tenant: "acme", Operation: "payment.charge", Key: fmt.Sprintf("parked-%d", i),
			Intent: json.RawMessage(fmt.Sprintf(`{"amount":%d,"currency":"USD"}`, 200+i)), Spec: slowCharge{}.Intent(), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("seed %d: %v %v", i, out, err)
		}
		if err := f.claims.Fail(ctx, nil, out.Lease, claim.RetryableFailure("timeout", "no answer from the channel")); err != nil {
			t.Fatal(err)
		}
		k, err := f.claims.Get(ctx, out.KeyID)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, *k)
	}
	plan, err := f.w.PreviewBulk(ctx, f.actor, replay.BulkSelection{Filter: "tenant=acme", Selected: true, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Counts.ByOutcome[string(replay.PredictNotFoundOnce)] != len(keys) {
		t.Fatalf("preview: %+v, want every key not found once", plan.Counts)
	}
	run, err := f.w.StartBulk(ctx, f.actor, plan.Plan, plan.Token, "channel outage")
	if err != nil {
		t.Fatal(err)
	}
	d := newReplica(t, f.db, "cli", f.w)
	pass := func() {
		t.Helper()
		if jr, err := d.RunJob(ctx, replay.BulkJobName); err != nil || jr.Status != daemon.RunSucceeded {
			t.Fatalf("bulk pass: %v %v", jr, err)
		}
	}
	read := func() (*replay.BulkRun, []replay.BulkItem) {
		t.Helper()
		got, err := f.w.BulkRun(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		items, err := f.w.BulkItems(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got, items
	}

	pass()
	got, items := read()
	if got.State != "waiting" || got.RecheckAt == nil || got.FinishedAt != nil || got.Processed != len(keys) {
		t.Fatalf("after the first pass: state %s, recheck %v, processed %d; want waiting with a re-check time, every key looked at", got.State, got.RecheckAt, got.Processed)
	}
	for _, it := range items {
		k, err := f.claims.Get(ctx, it.KeyID)
		if err != nil {
			t.Fatal(err)
		}
		if !it.Parked() || it.RecheckAt == nil || k.LeaseExpiresAt == nil || !it.RecheckAt.Equal(*k.LeaseExpiresAt) || it.Checks != 0 {
			t.Errorf("item %d: result %v, recheck %v, key's lease %v, checks %d; want parked until the key's lease ends", it.Seq, it.Result, it.RecheckAt, k.LeaseExpiresAt, it.Checks)
		}
	}
	if n := f.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_done' AND target = ?`, fmt.Sprintf("bulk:%d", run.ID)); n != 0 {
		t.Error("a run with parked keys was audited as done")
	}

	// Before the re-check is due, a pass leaves the run waiting.
	pass()
	if got, _ := read(); got.State != "waiting" {
		t.Fatalf("a pass before the re-check: state %s, want waiting", got.State)
	}

	// The quarantine passes (moved back rather than waited out): the next pass looks again.
	pgtest.Exec(t, f.db, `UPDATE idempotency_keys SET not_found_at = not_found_at - interval '1 hour', lease_expires_at = now() - interval '1 second'
		WHERE tenant = 'acme'`)
	pgtest.Exec(t, f.db, `UPDATE replay_bulk_items SET recheck_at = now() - interval '1 second' WHERE run_id = ? AND recheck_at IS NOT NULL`, run.ID)
	pgtest.Exec(t, f.db, `UPDATE replay_bulk_runs SET recheck_at = now() - interval '1 second' WHERE id = ?`, run.ID)
	pass()
	got, items = read()
	var results map[string]int
	_ = json.Unmarshal(got.Results, &results)
	if got.State != "done" || got.Processed != len(keys) || results["sent"] != len(keys) || got.RecheckAt != nil {
		t.Fatalf("after the re-check: state %s, processed %d, results %v; want done, every key sent", got.State, got.Processed, results)
	}
	for _, it := range items {
		if it.Parked() || it.Checks != 1 || it.RecheckAt != nil {
			t.Errorf("item %d: result %v, checks %d, recheck %v; want sent after one check", it.Seq, it.Result, it.Checks, it.RecheckAt)
		}
		if k, _ := f.claims.Get(ctx, it.KeyID); k.State != claim.StateCompleted {
			t.Errorf("key %d: %s, want completed", it.KeyID, k.State)
		}
	}
	if n := f.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.recheck' AND target = ? AND detail::jsonb->>'keys' = '2'`, fmt.Sprintf("bulk:%d", run.ID)); n != 1 {
		t.Errorf("the re-check audited %d times, want once naming its 2 keys", n)
	}
	if n := f.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_done' AND target = ?`, fmt.Sprintf("bulk:%d", run.ID)); n != 1 {
		t.Errorf("bulk_done audited %d times, want once", n)
	}
}
