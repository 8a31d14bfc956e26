package console

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/daemon/daemontest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
)

// gatedJob reports progress and waits for its gate, so a test can watch a run while it runs.
type gatedJob struct {
	gate chan struct{}
}

func (j *gatedJob) Name() string { return "sweep" }
func (j *gatedJob) RunOnce(ctx context.Context, _ []byte, p daemon.Progress) (daemon.Stats, error) {
	p.Report("sweeping", 3, 10)
	select {
	case <-j.gate:
	case <-ctx.Done():
		return daemon.Stats{"swept": 3}, ctx.Err()
	}
	return daemon.Stats{"swept": 10}, nil
}

// startDaemon runs a real daemon replica on b's database with one gated job, the bulk replay
// job on the console's workflow and the bulk findings job on its reconciler (as `idemops serve`
// runs them).
func (b *bundle) startDaemon() *gatedJob {
	b.t.Helper()
	if b.daemon != nil {
		b.t.Fatal("the bundle's daemon is running already")
	}
	job := &gatedJob{gate: make(chan struct{})}
	b.daemon = startReplica(b.t, b.db, "replica-a", map[daemon.Job]string{job: "@every 1h",
		replay.NewBulkJob(b.srv.Replays()): replay.BulkJobSpec, reconcile.NewBulkJob(b.srv.recon): reconcile.BulkJobSpec})
	b.await("a leader", b.daemon.IsLeader, "daemon_leader") // the lease is renewed every 250 ms: a change each time
	return job
}

// startReplica starts a daemon replica called name on db running jobs (each on its schedule
// spec), with short leases and polls; the test's end stops it.
func startReplica(t testing.TB, db *gorm.DB, name string, jobs map[daemon.Job]string) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(daemon.Config{DB: db, Name: name, LeaseTTL: time.Second, RenewEvery: 250 * time.Millisecond,
		PollEvery: 20 * time.Millisecond, ShutdownTimeout: 2 * time.Second, ProgressEvery: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for job, spec := range jobs {
		if err := d.Register(job, spec); err != nil {
			t.Fatal(err)
		}
	}
	daemontest.Start(t, d)
	return d
}

// await waits until cond holds, re-checking it whenever one of tables changes (pgtest.Await).
func (b *bundle) await(what string, cond func() bool, tables ...string) {
	b.t.Helper()
	pgtest.Await(b.t, b.db, 10*time.Second, what, cond, tables...)
}

// TestJobs_LeaderSchedulesRunNowPauseResumeAndLiveRuns: the jobs page shows the leader, the
// replicas and the schedules; an operator runs a job now (audited) and watches its progress
// (the runs table polls while it runs and stops polling after); only an admin pauses and
// resumes.
func TestJobs_LeaderSchedulesRunNowPauseResumeAndLiveRuns(t *testing.T) {
	b := setup(t)
	b.addOperator("vic", access.RoleViewer, "acme")
	// The sweep's schedule is every tenant's (it is no recon job's): only an operator of every
	// tenant runs it; one of acme sees it and is refused (403).
	b.addOperator("olga", access.RoleOperator, "*")
	b.addOperator("otto", access.RoleOperator, "acme")
	b.addOperator("ada", access.RoleAdmin, "*")
	job := b.startDaemon()
	if got := b.signIn("otto").post("/jobs/run", url.Values{"name": {"sweep"}}, true); got.Status != 403 {
		t.Errorf("run now of every tenant's schedule by an operator of acme: %d, want 403", got.Status)
	}

	vic := b.signIn("vic")
	page := vic.get("/jobs").Body
	mustContain(t, "viewer's jobs page", page, "replica-a", "leader", `id="schedule-sweep"`, "@every 1h", "No job has run yet")
	mustNotContain(t, "viewer's jobs page", page, `id="run-sweep"`, `id="pause-sweep"`)

	olga := b.signIn("olga")
	mustContain(t, "operator's jobs page", olga.get("/jobs").Body, `id="run-sweep"`)
	mustNotContain(t, "operator's jobs page", olga.get("/jobs").Body, `id="pause-sweep"`)
	if got := olga.post("/jobs/run", url.Values{"name": {"sweep"}}, true); got.Status != 303 || got.Location != "/jobs?notice=run" {
		t.Fatalf("run now: %d %s", got.Status, got.Location)
	}
	b.await("the run to start", func() bool {
		return b.count(`SELECT count(*) FROM job_runs WHERE job = 'sweep' AND status = 'running' AND done = 3`) == 1
	}, "job_runs")
	running := olga.get("/jobs/runs").Body
	mustContain(t, "runs while running", running, `hx-trigger="every 1s"`, "run_now", "running", "3/10", "sweeping")
	close(job.gate)
	b.await("the run to finish", func() bool {
		return b.count(`SELECT count(*) FROM job_runs WHERE job = 'sweep' AND status = 'succeeded'`) == 1
	}, "job_runs")
	done := olga.get("/jobs/runs").Body
	mustContain(t, "runs after the run", done, `data-polling="false"`, "succeeded", "swept=10")
	mustNotContain(t, "runs after the run", done, "hx-get")
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'job.run' AND actor = 'operator:olga' AND target = 'schedule:sweep'`); n != 1 {
		t.Errorf("run now audit rows: %d", n)
	}

	if got := olga.post("/jobs/pause", url.Values{"name": {"sweep"}}, true); got.Status != 403 {
		t.Errorf("operator pause: %d, want 403", got.Status)
	}
	ada := b.signIn("ada")
	if got := ada.post("/jobs/pause", url.Values{"name": {"sweep"}}, true); got.Status != 303 {
		t.Fatalf("admin pause: %d", got.Status)
	}
	mustContain(t, "paused", ada.get("/jobs?notice=pause").Body, "Schedule paused", "paused", `id="resume-sweep"`)
	tok := b.token("ada")
	if got := ada.apiPost("/api/v1/jobs/resume", tok, map[string]string{"name": "sweep"}); got.Status != 202 {
		t.Errorf("API resume: %d", got.Status)
	}
	if b.count(`SELECT count(*) FROM schedules WHERE name = 'sweep' AND NOT paused`) != 1 {
		t.Error("the schedule is still paused after resume")
	}
	if got := ada.post("/jobs/pause", url.Values{"name": {"no-such-job"}}, true); got.Status != 404 {
		t.Errorf("pause of an unknown schedule: %d", got.Status)
	}
	for _, action := range []string{"job.pause", "job.resume"} {
		if n := b.count(`SELECT count(*) FROM audit_log WHERE action = ? AND actor = 'operator:ada'`, action); n != 1 {
			t.Errorf("%s audit rows: %d", action, n)
		}
	}
	jobs := ada.api("/api/v1/jobs", b.token("ada"))
	if jobs.Status != 200 || !strings.Contains(jobs.Body, `"LeaderID"`) || !strings.Contains(jobs.Body, `"swept":10`) {
		t.Errorf("API jobs: %d %s", jobs.Status, truncate(jobs.Body, 300))
	}
	// An operator of acme sees the schedule but not the runs: their figures count every tenant's keys.
	jobs = vic.api("/api/v1/jobs", b.token("vic"))
	if jobs.Status != 200 || !strings.Contains(jobs.Body, `"sweep"`) || strings.Contains(jobs.Body, `"swept"`) {
		t.Errorf("API jobs for acme: %d %s", jobs.Status, truncate(jobs.Body, 300))
	}
}

// TestJobs_RunsFilterRunPageAndDashboardCards: the runs list filters by job and status (kept in
// the polling URL; an unknown status is a 400 naming the field), each run has a page with its
// timings, progress, stats and error, and the dashboard shows the daemon as cards — the leader
// with its term and lease left, the replicas with when they were last seen, the schedules with
// their next and last run — instead of raw rows.
func TestJobs_RunsFilterRunPageAndDashboardCards(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "*") // the sweep is a system schedule: every tenant
	job := b.startDaemon()
	olga := b.signIn("olga")
	if got := olga.post("/jobs/run", url.Values{"name": {"sweep"}}, true); got.Status != 303 {
		t.Fatalf("run now: %d", got.Status)
	}
	b.await("the run to start", func() bool {
		return b.count(`SELECT count(*) FROM job_runs WHERE job = 'sweep' AND status = 'running' AND done = 3`) == 1
	}, "job_runs")
	running := olga.get("/jobs?job=sweep&status=running").Body
	mustContain(t, "filtered while running", running, `hx-get="/jobs/runs?job=sweep&amp;status=running"`, "3/10",
		`<option value="running" selected`)
	close(job.gate)
	b.await("the run to finish", func() bool {
		return b.count(`SELECT count(*) FROM job_runs WHERE job = 'sweep' AND status = 'succeeded'`) == 1
	}, "job_runs")
	id := b.count(`SELECT id FROM job_runs WHERE job = 'sweep'`)
	href := "/jobs/runs/" + strconv.FormatInt(id, 10)
	mustContain(t, "succeeded filter", olga.get("/jobs?status=succeeded").Body, `href="`+href+`"`, "swept=10")
	mustContain(t, "failed filter", olga.get("/jobs?status=failed").Body, "No run matches this filter")
	bad := olga.get("/jobs?status=exploded")
	if bad.Status != 400 || !strings.Contains(bad.Body, "status") {
		t.Errorf("unknown status: %d %s", bad.Status, truncate(bad.Body, 200))
	}
	run := olga.get(href)
	if run.Status != 200 {
		t.Fatalf("run page: %d", run.Status)
	}
	mustContain(t, "run page", run.Body, `id="run-status">succeeded`, "run_now", "replica-a", "3 of 10", "sweeping", "swept=10", "took ")
	mustContain(t, "dashboard", olga.get("/").Body, `id="leader-card"`, "Leader · term", "lease ends in ", "seen ",
		`id="schedule-card-sweep"`, "next run in ", "succeeded")
	mustNotContain(t, "dashboard", olga.get("/").Body, "elected_at", "renewed_at")
}
