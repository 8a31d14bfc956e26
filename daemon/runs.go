package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/errs"
)

// RunStatus is where a job run stands.
type RunStatus string

const (
	RunRunning   RunStatus = "running"
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
	// RunAbandoned: the run stopped before its pass was complete (the daemon stopped, the
	// leadership moved, or the replica died and a later leader found the run left running).
	RunAbandoned RunStatus = "abandoned"
	RunTimedOut  RunStatus = "timed_out"
)

// Triggers say why a run started.
const (
	TriggerSchedule = "schedule"
	TriggerRunNow   = "run_now"
	TriggerCLI      = "cli"
)

// Run is one execution of a job (a job_runs row).
type Run struct {
	ID         int64
	Schedule   string // empty for a CLI run of a job without a schedule
	Job        string
	Trigger    string
	Replica    string
	Term       *int64 // the leader's term for scheduled runs
	Status     RunStatus
	StartedAt  time.Time
	DeadlineAt time.Time
	FinishedAt *time.Time
	Stats      Stats
	Error      string
	// ErrorPhrase is Error as a phrase, when the job's error carried one that says the whole
	// line, for a console that shows it in its operator's language (not in the API's JSON).
	ErrorPhrase errs.NullPhrase `json:"-"`
	Phase       string
	Done        int64
	Total       int64
	ProgressAt  *time.Time
}

// Duration is how long the run took, or has been running.
func (r *Run) Duration() time.Duration {
	if r.FinishedAt != nil {
		return r.FinishedAt.Sub(r.StartedAt)
	}
	return time.Since(r.StartedAt)
}

type runRow struct {
	ID          int64
	Schedule    *string
	Job         string
	Trigger     string
	Replica     string
	Term        *int64
	Status      string
	StartedAt   time.Time
	DeadlineAt  time.Time
	FinishedAt  *time.Time
	Stats       string
	Error       *string
	ErrorPhrase errs.NullPhrase
	Phase       *string
	Done        int64
	Total       int64
	ProgressAt  *time.Time
}

const runColumns = `id, schedule, job, trigger, replica, term, status, started_at, deadline_at, finished_at,
	stats::text AS stats, error, error_phrase::text AS error_phrase, phase, done, total, progress_at`

func (r runRow) run() Run {
	out := Run{ID: r.ID, Schedule: deref(r.Schedule), Job: r.Job, Trigger: r.Trigger, Replica: r.Replica, Term: r.Term,
		Status: RunStatus(r.Status), StartedAt: r.StartedAt, DeadlineAt: r.DeadlineAt, FinishedAt: r.FinishedAt,
		Error: deref(r.Error), ErrorPhrase: r.ErrorPhrase, Phase: deref(r.Phase), Done: r.Done, Total: r.Total, ProgressAt: r.ProgressAt}
	_ = json.Unmarshal([]byte(r.Stats), &out.Stats)
	return out
}

// RunFilter selects runs for ListRuns; zero fields do not filter.
type RunFilter struct {
	Job      string
	Schedule string
	Status   RunStatus
	// BeforeID pages backwards: only runs with a smaller id (keyset pagination).
	BeforeID int64
	// Limit is at most 500 (0: 50).
	Limit int
}

// ListRuns returns runs newest first (job_runs_job_idx / job_runs_schedule_idx serve the
// filtered listings).
func ListRuns(ctx context.Context, db *gorm.DB, f RunFilter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	q := db.WithContext(ctx).Table("job_runs").Select(runColumns)
	if f.Job != "" {
		q = q.Where("job = ?", f.Job)
	}
	if f.Schedule != "" {
		q = q.Where("schedule = ?", f.Schedule)
	}
	if f.Status != "" {
		q = q.Where("status = ?", string(f.Status))
	}
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	var rows []runRow
	if err := q.Order("id DESC").Limit(f.Limit).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]Run, len(rows))
	for i, r := range rows {
		out[i] = r.run()
	}
	return out, nil
}

// GetRun returns one run (ErrUnknownRun).
func GetRun(ctx context.Context, db *gorm.DB, id int64) (*Run, error) {
	var rows []runRow
	if err := db.WithContext(ctx).Raw(`SELECT `+runColumns+` FROM job_runs WHERE id = ?`, id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("get run %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("run %d: %w", id, ErrUnknownRun)
	}
	r := rows[0].run()
	return &r, nil
}

// startRun records a run start outside any schedule transaction (CLI runs).
func startRun(ctx context.Context, db *gorm.DB, schedule, job, trigger, replica string, term *int64, timeout time.Duration) (int64, error) {
	var sched any
	if schedule != "" {
		sched = schedule
	}
	var ids []int64
	err := db.WithContext(ctx).Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, term, deadline_at)
		VALUES (?, ?, ?, ?, ?, now() + ? * interval '1 millisecond') RETURNING id`,
		sched, job, trigger, replica, term, timeout.Milliseconds()).Scan(&ids).Error
	if err != nil || len(ids) != 1 {
		return 0, fmt.Errorf("record start of %s: %w", job, err)
	}
	return ids[0], nil
}

// finishRun records how a run ended, with its last progress, and its error's first line: as
// text, and as the phrase the error carries when that says the whole line.
func finishRun(ctx context.Context, db *gorm.DB, id int64, status RunStatus, stats Stats, runErr error, p progressState) error {
	if stats == nil {
		stats = Stats{}
	}
	b, _ := json.Marshal(stats)
	var errText any
	var why errs.NullPhrase
	if runErr != nil {
		line := oneLine(runErr.Error())
		errText, why = line, errs.PhraseOf(runErr, line)
	}
	err := db.WithContext(ctx).Exec(`UPDATE job_runs SET status = ?, finished_at = now(), stats = ?, error = ?, error_phrase = ?::jsonb,
		phase = COALESCE(NULLIF(?, ''), phase), done = ?, total = ?, progress_at = now() WHERE id = ?`,
		string(status), string(b), errText, why, p.phase, p.done, p.total, id).Error
	if err != nil {
		return fmt.Errorf("record end of run %d: %w", id, err)
	}
	return nil
}

// The errors sweepAbandoned records: fixed texts, which a console looks up whole in its
// catalog to say them in its operator's language.
const (
	ErrTextEarlierLeader = "left running by an earlier leader"
	ErrTextPastDeadline  = "past its deadline with no end recorded"
)

// sweepAbandoned marks runs that earlier leaders left running, or that are well past their
// deadline, as abandoned (job_runs_running_idx serves it). It returns how many it marked.
func sweepAbandoned(ctx context.Context, db *gorm.DB, term int64) (int64, error) {
	res := db.WithContext(ctx).Exec(`UPDATE job_runs SET status = 'abandoned', finished_at = now(),
		error = CASE WHEN term < ? THEN ?::text ELSE ?::text END
		WHERE status = 'running' AND ((term IS NOT NULL AND term < ?) OR deadline_at < now() - interval '1 minute')`,
		term, ErrTextEarlierLeader, ErrTextPastDeadline, term)
	if res.Error != nil {
		return 0, fmt.Errorf("sweep abandoned runs: %w", res.Error)
	}
	return res.RowsAffected, nil
}

type progressState struct {
	phase       string
	done, total int64
}

// runProgress persists a run's progress to its job_runs row, at most once per every: jobs may
// report per item, the row is written about once a second.
type runProgress struct {
	db    *gorm.DB
	ctx   context.Context
	id    int64
	every time.Duration

	mu        sync.Mutex
	state     progressState
	lastWrite time.Time
	writeMu   sync.Mutex // one write at a time, always of the latest state
}

// Report records progress; it writes only when the last write is older than the throttle.
func (p *runProgress) Report(phase string, done, total int64) {
	p.mu.Lock()
	p.state = progressState{phase: phase, done: done, total: total}
	if time.Since(p.lastWrite) < p.every {
		p.mu.Unlock()
		return
	}
	p.lastWrite = time.Now()
	p.mu.Unlock()

	if !p.writeMu.TryLock() {
		return // a write is under way; the next report after the throttle carries the latest
	}
	defer p.writeMu.Unlock()
	s := p.latest()
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	// Progress is advisory: a failed write is retried by the next report, not reported.
	_ = p.db.WithContext(ctx).Exec(`UPDATE job_runs SET phase = ?, done = ?, total = ?, progress_at = now()
		WHERE id = ? AND status = 'running'`, s.phase, s.done, s.total, p.id).Error
}

func (p *runProgress) latest() progressState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}
