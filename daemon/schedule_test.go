package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/daemon/daemontest"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestValidateSchedule_OneLineErrorNamingTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec, zone string
		wantIn     string // "" means valid
	}{
		{"*/5 * * * *", "UTC", ""},
		{"0 3 * * *", "Asia/Shanghai", ""},
		{"@every 10s", "", ""},
		{"30 0 3 * * *", "Europe/Berlin", ""},
		{"", "UTC", "spec"},
		{"every day", "UTC", `spec "every day"`},
		{"61 * * * *", "UTC", `spec "61 * * * *"`},
		{"0 0 30 2 *", "UTC", "never fires"},
		{"TZ=UTC 0 3 * * *", "UTC", "time zone in its own field"},
		{"0 3 * * *", "Mars/Olympus", `time zone "Mars/Olympus"`},
		{"0 3 * * *", "Local", `time zone "Local"`},
	}
	for _, c := range cases {
		err := daemon.ValidateSchedule(c.spec, c.zone)
		if c.wantIn == "" {
			if err != nil {
				t.Errorf("ValidateSchedule(%q, %q) = %v, want valid", c.spec, c.zone, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, daemon.ErrInvalidSchedule) || !strings.Contains(err.Error(), c.wantIn) ||
			strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("ValidateSchedule(%q, %q) = %v, want one line containing %q", c.spec, c.zone, err, c.wantIn)
		}
	}
	next, err := daemon.NextRun("0 3 * * *", "Asia/Shanghai", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || !next.Equal(time.Date(2026, 1, 1, 19, 0, 0, 0, time.UTC)) {
		t.Fatalf("NextRun = %v, %v; want 03:00 Shanghai = 19:00 UTC", next, err)
	}
}

func runsOf(t *testing.T, db *gorm.DB, schedule string) []daemon.Run {
	t.Helper()
	runs, err := daemon.ListRuns(context.Background(), db, daemon.RunFilter{Schedule: schedule, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func nextRunAt(t *testing.T, db *gorm.DB, name string) time.Time {
	t.Helper()
	s, err := daemon.GetSchedule(context.Background(), db, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.NextRunAt
}

func TestSchedule_MissedRunRunsOnceAfterARestart(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	job := &countingJob{name: "tick"}

	first := newDaemon(t, open(t, url), "first", nil)
	if err := first.Register(job, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, first)
	onlyLeader(t, first)
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if job.runs.Load() != 0 {
		t.Fatalf("ran %d times before its first slot", job.runs.Load())
	}

	// Down for three days: three slots missed.
	pgtest.Exec(t, db, `UPDATE schedules SET next_run_at = now() - interval '3 days' WHERE name = 'tick'`)

	second := newDaemon(t, open(t, url), "second", nil)
	if err := second.Register(job, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, second)
	if run := second.TestSignals().RunFinished.Wait(t, 3*time.Second); run.Schedule != "tick" || run.Status != daemon.RunSucceeded {
		t.Fatalf("the missed run: %+v", run)
	}
	// Ten more polls: no pile-up of the other missed slots.
	waitPolls(t, second, 10)
	if n := job.runs.Load(); n != 1 {
		t.Fatalf("missed schedule ran %d times, want once", n)
	}
	if next := nextRunAt(t, db, "tick"); !next.After(time.Now()) {
		t.Fatalf("next run %v not in the future", next)
	}
	runs := runsOf(t, db, "tick")
	if len(runs) != 1 || runs[0].Status != daemon.RunSucceeded {
		t.Fatalf("runs %+v, want one succeeded", runs)
	}
	r := runs[0]
	if r.Trigger != daemon.TriggerSchedule || r.Replica != second.ID() || r.Term == nil || r.FinishedAt == nil ||
		r.Stats["batches"] != 1 || r.Phase != "work" || r.Done != 1 || r.Total != 1 {
		t.Fatalf("run %+v", r)
	}
}

func TestSchedule_PauseRunNowResume(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	ctx := context.Background()
	job := &countingJob{name: "tick"}
	d := newDaemon(t, open(t, url), "d", nil)
	if err := d.Register(job, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, d)
	onlyLeader(t, d)

	if err := daemon.Pause(ctx, db, "tick"); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, db, `UPDATE schedules SET next_run_at = now() - interval '1 hour' WHERE name = 'tick'`)
	waitPolls(t, d, 10)
	if n := job.runs.Load(); n != 0 {
		t.Fatalf("paused schedule ran %d times", n)
	}

	if err := daemon.RunNow(ctx, db, "tick"); err != nil {
		t.Fatal(err)
	}
	d.TestSignals().RunFinished.Wait(t, 2*time.Second)
	waitPolls(t, d, 5)
	if n := job.runs.Load(); n != 1 {
		t.Fatalf("run-now ran %d times, want once", n)
	}
	if runs := runsOf(t, db, "tick"); len(runs) != 1 || runs[0].Trigger != daemon.TriggerRunNow || runs[0].Status != daemon.RunSucceeded {
		t.Fatalf("runs %+v, want one succeeded run-now", runs)
	}

	// The slot missed while paused runs once on resume.
	if err := daemon.Resume(ctx, db, "tick"); err != nil {
		t.Fatal(err)
	}
	d.TestSignals().RunFinished.Wait(t, 2*time.Second)
	if n := job.runs.Load(); n != 2 {
		t.Fatalf("after resume the job ran %d times in all, want 2", n)
	}

	if err := daemon.RunNow(ctx, db, "nope"); !errors.Is(err, daemon.ErrUnknownSchedule) {
		t.Fatalf("RunNow(nope) = %v, want ErrUnknownSchedule", err)
	}
	list, err := daemon.ListSchedules(ctx, db)
	if err != nil || len(list) != 1 || list[0].LastRun == nil || list[0].Paused {
		t.Fatalf("ListSchedules = %+v, %v", list, err)
	}
}

func TestSchedule_SaveValidatesAndOtherSchedulesRunTheSameJob(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	ctx := context.Background()
	err := daemon.SaveSchedule(ctx, db, daemon.ScheduleSpec{Name: "recon:alipay", Job: "tick", Spec: "0 3 * *"})
	if !errors.Is(err, daemon.ErrInvalidSchedule) {
		t.Fatalf("bad spec saved: %v", err)
	}
	err = daemon.SaveSchedule(ctx, db, daemon.ScheduleSpec{Name: "recon:alipay", Job: "tick", Spec: "0 3 * * *", Params: []byte(`[1]`)})
	if !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Fatalf("non-object params saved: %v", err)
	}
	if err := daemon.SaveSchedule(ctx, db, daemon.ScheduleSpec{Name: "recon:alipay", Job: "tick", Spec: "0 3 * * *",
		TimeZone: "Asia/Shanghai", Params: []byte(`{"channel":"alipay"}`), Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := daemon.RunNow(ctx, db, "recon:alipay"); err != nil {
		t.Fatal(err)
	}
	job := &countingJob{name: "tick"}
	d := newDaemon(t, open(t, url), "d", nil)
	if err := d.Register(job, "0 4 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, d)
	d.TestSignals().RunFinished.WaitFor(t, 3*time.Second, "the requested recon schedule", func(r *daemon.Run) bool {
		return r.Schedule == "recon:alipay"
	})
	if runs := runsOf(t, db, "recon:alipay"); len(runs) != 1 || runs[0].Status != daemon.RunSucceeded || runs[0].Job != "tick" {
		t.Fatalf("runs %+v, want one succeeded run of tick", runs)
	}
}

func TestRun_TimeoutFailureAndMetrics(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	slow := &countingJob{name: "slow", batch: time.Hour}
	broken := &countingJob{name: "broken", fail: errors.New("channel said no\nsecond line")}
	// A job's error that carries a phrase keeps it beside the text, for a console in another
	// language; wrapped in more text than the phrase says, it keeps the text only.
	phrased := &countingJob{name: "phrased", fail: errs.Errorf("channel %s said no: %w", "stripe", errs.New(errs.Unavailable, "closed"))}
	wrapped := &countingJob{name: "wrapped", fail: fmt.Errorf("pass: %w", errs.Errorf("channel %s said no", "stripe"))}
	d := newDaemon(t, open(t, url), "d", func(c *daemon.Config) { c.Registerer = reg })
	for _, j := range []*countingJob{slow, broken, phrased, wrapped} {
		if err := d.Register(j, "0 3 * * *"); err != nil {
			t.Fatal(err)
		}
	}
	daemontest.Start(t, d)
	onlyLeader(t, d)
	pgtest.Exec(t, db, `UPDATE schedules SET timeout_ms = 100 WHERE name = 'slow'`)
	for _, n := range []string{"slow", "broken", "phrased", "wrapped"} {
		if err := daemon.RunNow(ctx, db, n); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		d.TestSignals().RunFinished.Wait(t, 3*time.Second)
	}
	if r := runsOf(t, db, "slow")[0]; r.Status != daemon.RunTimedOut {
		t.Fatalf("slow run %+v, want timed_out", r)
	}
	if r := runsOf(t, db, "broken")[0]; r.Status != daemon.RunFailed || r.Error != "channel said no" {
		t.Fatalf("broken run %+v, want failed with a one-line error", r)
	} else if r.ErrorPhrase.Valid {
		t.Errorf("broken run has a phrase %+v; its error carried none", r.ErrorPhrase)
	}
	if r := runsOf(t, db, "phrased")[0]; r.Error != "channel stripe said no: closed" ||
		!r.ErrorPhrase.Valid || r.ErrorPhrase.Phrase.Format != "channel %s said no: %s" || r.ErrorPhrase.Phrase.String() != r.Error {
		t.Errorf("phrased run: error %q, phrase %+v; want the error's phrase kept", r.Error, r.ErrorPhrase)
	}
	if r := runsOf(t, db, "wrapped")[0]; r.Error != "pass: channel stripe said no" || r.ErrorPhrase.Valid {
		t.Errorf("wrapped run: error %q, phrase %+v; want the text only", r.Error, r.ErrorPhrase)
	}
	want := map[string]bool{`job_runs_total{job="slow",status="timed_out"}`: false, `job_runs_total{job="broken",status="failed"}`: false}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			key := strings.TrimPrefix(mf.GetName(), "idemops_daemon_") + `{job="` + labels["job"] + `",status="` + labels["status"] + `"}`
			if _, ok := want[key]; ok && m.GetCounter().GetValue() == 1 {
				want[key] = true
			}
		}
	}
	for k, ok := range want {
		if !ok {
			t.Errorf("metric %s not 1", k)
		}
	}
}

func TestRun_StopFinishesTheBatchInHandAndRecordsAbandoned(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	job := &countingJob{name: "batches", batches: 1000, batch: 50 * time.Millisecond}
	job.batchFinished.Init()
	d := newDaemon(t, open(t, url), "d", nil)
	if err := d.Register(job, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, d)
	if err := daemon.RunNow(context.Background(), db, "batches"); err != nil {
		t.Fatal(err)
	}
	job.batchFinished.WaitFor(t, 3*time.Second, "a few batches", func(n int64) bool { return n >= 3 })
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, f := job.startedBatches.Load(), job.finishedBatches.Load(); s != f {
		t.Fatalf("stop left a batch half done: started %d, finished %d", s, f)
	}
	runs := runsOf(t, db, "batches")
	if len(runs) != 1 || runs[0].Status != daemon.RunAbandoned || runs[0].Stats["batches"] != job.finishedBatches.Load() {
		t.Fatalf("runs %+v, want one abandoned run with its finished batches", runs)
	}
}

func TestRun_StopCancelsAJobThatIgnoresItAfterTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	job := &countingJob{name: "stubborn", batch: time.Hour}
	job.batchStarted.Init()
	d := newDaemon(t, open(t, url), "d", func(c *daemon.Config) { c.ShutdownTimeout = 200 * time.Millisecond })
	if err := d.Register(job, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, d)
	if err := daemon.RunNow(context.Background(), db, "stubborn"); err != nil {
		t.Fatal(err)
	}
	job.batchStarted.Wait(t, 3*time.Second) // the run under way
	began := time.Now()
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Stop took %s with a 200ms shutdown timeout", took)
	}
	if runs := runsOf(t, db, "stubborn"); len(runs) != 1 || runs[0].Status != daemon.RunAbandoned {
		t.Fatalf("runs %+v, want one abandoned", runs)
	}
}

func TestRun_ANewLeaderMarksRunsLeftByADeadOneAbandoned(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	dbA := open(t, url)
	jobA := &countingJob{name: "long", batch: time.Hour}
	jobA.batchStarted.Init()
	a := newDaemon(t, dbA, "a", nil)
	if err := a.Register(jobA, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	killA := daemontest.Start(t, a)
	if err := daemon.RunNow(context.Background(), db, "long"); err != nil {
		t.Fatal(err)
	}
	jobA.batchStarted.Wait(t, 3*time.Second) // a's run under way
	killA()
	closeDB(dbA)

	b := newDaemon(t, open(t, url), "b", nil)
	if err := b.Register(&countingJob{name: "long"}, "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, b)
	b.TestSignals().Elected.Wait(t, 3*time.Second) // it sweeps before it signals
	if runs := runsOf(t, db, "long"); len(runs) != 1 || runs[0].Status != daemon.RunAbandoned || !strings.Contains(runs[0].Error, "earlier leader") {
		t.Fatalf("runs %+v, want a's run marked abandoned by the new leader", runs)
	}
}
