package reconcile_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
)

func TestJobSpec_ValidationNamesTheField(t *testing.T) {
	t.Parallel()
	base := reconcile.JobSpec{Name: "wechat-daily", Channel: "wechat", Format: "wechat", Source: "/bills/{date}.csv",
		Operations: []string{"payment.charge"}, BillDateOffsetDays: 1, CronSpec: "0 11 * * *", TimeZone: "Asia/Shanghai"}
	for _, tc := range []struct {
		mod   func(*reconcile.JobSpec)
		field string
	}{
		{func(s *reconcile.JobSpec) { s.CronSpec = "61 * * * *" }, "cron_spec"},
		{func(s *reconcile.JobSpec) { s.CronSpec = "" }, "cron_spec"},
		{func(s *reconcile.JobSpec) { s.CronSpec = "CRON_TZ=UTC 0 1 * * *" }, "cron_spec"},
		{func(s *reconcile.JobSpec) { s.TimeZone = "Mars/Olympus" }, "time_zone"},
		{func(s *reconcile.JobSpec) { s.Source = "/bills/today.csv" }, "source"},
		{func(s *reconcile.JobSpec) { s.Source = "http:///statements/{date}" }, "source"},
		{func(s *reconcile.JobSpec) { s.Format = "csv" }, "format"},
		{func(s *reconcile.JobSpec) { s.Operations = nil }, "operations"},
		{func(s *reconcile.JobSpec) { s.BillDateOffsetDays = -1 }, "bill_date_offset_days"},
		{func(s *reconcile.JobSpec) { s.Name = "a b" }, "name"},
	} {
		s := base
		tc.mod(&s)
		err := s.Validate()
		if !errors.Is(err, reconcile.ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: err %v; want one line naming %s", s, err, tc.field)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("valid spec: %v", err)
	}
}

func TestNextRuns_AreTheNextFiveInTheJobsZone(t *testing.T) {
	t.Parallel()
	from := time.Date(2024, 3, 1, 4, 0, 0, 0, time.UTC) // 12:00 in Shanghai: today's 11:00 has passed
	runs, err := reconcile.NextRuns("0 11 * * *", "Asia/Shanghai", from, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 {
		t.Fatalf("%d runs", len(runs))
	}
	for i, r := range runs {
		want := time.Date(2024, 3, 2+i, 11, 0, 0, 0, shanghai)
		if !r.Equal(want) || r.Location().String() != "Asia/Shanghai" {
			t.Errorf("run %d at %s; want %s", i, r, want)
		}
	}
}

func TestJobs_CreateUpdateList(t *testing.T) {
	b := setup(t)
	j := b.createJob("wechat-daily", "/bills/{date}.csv", 0)
	if _, err := b.rec.CreateJob(b.ctx, j.JobSpec); !errors.Is(err, reconcile.ErrInvalid) {
		t.Errorf("duplicate name: %v", err)
	}
	spec := j.JobSpec
	spec.CronSpec, spec.Operations = "30 10 * * *", []string{"payment.charge", "payment.capture"}
	u, err := b.rec.UpdateJob(b.ctx, "wechat-daily", spec)
	if err != nil || u.CronSpec != "30 10 * * *" || len(u.Operations) != 2 || u.ID != j.ID {
		t.Fatalf("update %+v %v", u, err)
	}
	if err := b.rec.SetJobEnabled(b.ctx, "wechat-daily", false); err != nil {
		t.Fatal(err)
	}
	jobs, err := b.rec.ListJobs(b.ctx)
	if err != nil || len(jobs) != 1 || jobs[0].Enabled || jobs[0].Operations[1] != "payment.capture" {
		t.Errorf("list %+v %v", jobs, err)
	}
	if _, err := b.rec.GetJob(b.ctx, "nope"); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("missing job: %v", err)
	}
}

// recordingProgress keeps every report.
type recordingProgress struct {
	mu     sync.Mutex
	phases map[string]int64
	// waiting, when set, receives a signal when the run reports it waits for its statement.
	waiting chan struct{}
}

func (p *recordingProgress) Report(phase string, done, _ int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phases == nil {
		p.phases = map[string]int64{}
	}
	p.phases[phase] = max(p.phases[phase], done)
	if p.waiting != nil && phase == "waiting" {
		select {
		case p.waiting <- struct{}{}:
		default:
		}
	}
}

func TestJob_RetriesAStatementThatIsNotReadyYet(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	b.createJob("wechat-daily", filepath.Join(dir, "wechat_{yyyymmdd}.csv"), 0)
	k := b.key("paid", 100, "CNY", claim.StateCompleted)
	file := wechatBill([]wechatLine{{At: billDay.Add(9 * time.Hour), Txn: "T1", Order: k.DownstreamKey, Status: "SUCCESS", Amount: 100}}, 0)
	p := &recordingProgress{waiting: make(chan struct{}, 1)}
	go func() {
		<-p.waiting // the job found no statement and waits for it: now it is published
		os.WriteFile(filepath.Join(dir, "wechat_20240301.csv.tmp"), file, 0o644)
		os.Rename(filepath.Join(dir, "wechat_20240301.csv.tmp"), filepath.Join(dir, "wechat_20240301.csv"))
	}()
	stats, err := reconcile.NewJob(b.rec).RunOnce(b.ctx, []byte(`{"job": "wechat-daily", "date": "2024-03-01"}`), p)
	if err != nil {
		t.Fatal(err)
	}
	if stats["lines_loaded"] != 1 || stats["lines_matched"] != 1 {
		t.Errorf("stats %v", stats)
	}
	if p.phases["waiting"] < 1 || p.phases[reconcile.PhaseParse] != 1 || p.phases[reconcile.PhaseLoad] != 1 || p.phases[reconcile.PhaseMatch] != 1 {
		t.Errorf("progress %v", p.phases)
	}
	runs, err := b.rec.ListRuns(b.ctx, reconcile.RunFilter{Job: "wechat-daily"})
	if err != nil || len(runs) != 1 || runs[0].Status != reconcile.RunSucceeded || *runs[0].BillDate != billDate ||
		runs[0].RowsMatched != 1 || *runs[0].JobName != "wechat-daily" || runs[0].Actor != "daemon" {
		t.Errorf("runs %+v %v", runs, err)
	}
}

// waitingNotes checks, each time a run reports it is waiting, that the waiting run's note is
// stored with its phrase, which says the same.
type waitingNotes struct {
	db   *gorm.DB
	seen int
	bad  string
}

func (w *waitingNotes) Report(phase string, done, total int64) {
	if phase != "waiting" {
		return
	}
	var rows []struct {
		Error  string
		Phrase *string
	}
	w.db.Raw(`SELECT error, error_phrase::text AS phrase FROM recon_runs WHERE status = 'waiting'`).Scan(&rows)
	for _, r := range rows {
		w.seen++
		var p errs.NullPhrase
		if r.Phrase == nil || p.Scan(*r.Phrase) != nil || p.Phrase.Format != "attempt %d: %s; retrying in %s" || p.Phrase.String() != r.Error {
			w.bad = fmt.Sprintf("note %q with phrase %v", r.Error, r.Phrase)
		}
	}
}

func TestJob_FailsVisiblyWhenTheStatementIsStillMissingAtTheDeadline(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	b := setup(t, allow(srv.URL))
	job := b.createJob("wechat-http", srv.URL+"/statements/{date}?format=wechat", 0, func(s *reconcile.JobSpec) { s.ReadyDeadlineSeconds = 1 })
	// While it waits, the run's note says why as a phrase too (the console says it in its
	// operator's language), and so does its error when it fails.
	notes := &waitingNotes{db: b.db}
	run, err := b.rec.RunJob(b.ctx, job, "", "operator:alice", notes)
	if !errors.Is(err, reconcile.ErrNotReady) {
		t.Fatalf("err %v; want ErrNotReady", err)
	}
	if run.Status != reconcile.RunFailed || run.Error == nil || !strings.Contains(*run.Error, "404") || run.FinishedAt == nil {
		t.Errorf("run %+v", run)
	}
	if run.ErrorPhrase == nil || run.ErrorPhrase.Format != "%s; gave up at the ready deadline (%s) after %d attempts" ||
		run.ErrorPhrase.String() != *run.Error {
		t.Errorf("the failed run's phrase %+v does not say its error %q", run.ErrorPhrase, *run.Error)
	}
	if notes.seen == 0 || notes.bad != "" {
		t.Errorf("waiting notes: %d seen, %s", notes.seen, notes.bad)
	}
	if hits.Load() < 3 {
		t.Errorf("%d attempts; want retries with backoff until the deadline", hits.Load())
	}
}

func TestJob_FetchesOverHTTP(t *testing.T) {
	var file []byte
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "generating", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/statements/2024-03-01" || r.URL.Query().Get("format") != "wechat" {
			http.NotFound(w, r)
			return
		}
		w.Write(file)
	}))
	defer srv.Close()
	b := setup(t, allow(srv.URL))
	k := b.key("paid", 100, "CNY", claim.StateCompleted)
	file = wechatBill([]wechatLine{{At: billDay.Add(9 * time.Hour), Txn: "T1", Order: k.DownstreamKey, Status: "SUCCESS", Amount: 100},
		{At: billDay.Add(9 * time.Hour), Txn: "T2", Order: "unknown", Status: "SUCCESS", Amount: 5}}, 0)
	b.createJob("wechat-http", srv.URL+"/statements/{date}?format=wechat", 0)
	stats, err := reconcile.NewJob(b.rec).RunOnce(b.ctx, []byte(`{"job": "wechat-http", "date": "2024-03-01"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats["channel_only"] != 1 || stats["lines_loaded"] != 2 || !stats.Changed() {
		t.Errorf("stats %v", stats)
	}
}
