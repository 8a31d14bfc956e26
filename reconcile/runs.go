package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// RunStatus is where a recon run stands.
type RunStatus string

const (
	RunRunning   RunStatus = "running"
	RunWaiting   RunStatus = "waiting" // the statement is not ready yet; the run retries
	RunSucceeded RunStatus = "succeeded"
	RunRejected  RunStatus = "rejected" // the statement's control totals do not agree
	RunFailed    RunStatus = "failed"
)

// Run is one reconciliation: a statement imported (or found already imported) and matched.
type Run struct {
	ID      int64   `json:"id"`
	JobID   *int64  `json:"job_id,omitempty"`
	JobName *string `json:"job_name,omitempty"`
	// ControlRunID, on a cell's run in a deployment of cells, is the control cell's run that
	// started it (a recon job's or an ad hoc import's); JobName is then that run's job.
	ControlRunID    *int64           `json:"control_run_id,omitempty"`
	Channel         string           `json:"channel"`
	BillDate        *string          `json:"bill_date,omitempty"`
	StatementID     *int64           `json:"statement_id,omitempty"`
	StatementVer    *int             `json:"statement_version,omitempty"`
	Status          RunStatus        `json:"status"`
	Actor           string           `json:"actor"`
	AlreadyImported bool             `json:"already_imported"`
	RowsParsed      int64            `json:"rows_parsed"`
	RowsLoaded      int64            `json:"rows_loaded"`
	RowsMatched     int64            `json:"rows_matched"`
	Counts          map[string]int64 `json:"counts"`
	// KeysWithoutAccount is how many of the run's findings are about keys that do not say which
	// channel account they went through (MatchResult.KeysWithoutAccount).
	KeysWithoutAccount int64        `json:"keys_without_account"`
	Diff               *VersionDiff `json:"diff,omitempty"`
	Error              *string      `json:"error,omitempty"`
	// ErrorPhrase is Error as a phrase, for a console that shows it in another language (nil
	// when the error carried none).
	ErrorPhrase *errs.Phrase `json:"-"`
	StartedAt   time.Time    `json:"started_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
	FinishedAt  *time.Time   `json:"finished_at,omitempty"`
}

// RunRequest is one reconciliation to perform.
type RunRequest struct {
	// Job, when set, supplies the match settings and is recorded on the run.
	Job *ReconJob
	// Import describes the statement (channel, format, bill date, importer).
	Import ImportRequest
	// Match overrides the job's match settings (required without a Job for LOCAL_ONLY).
	Match *MatchSettings
	// RunID continues a run row already created (the scheduled job creates it before fetching);
	// 0 creates one.
	RunID int64
	// control links a cell's run to the control cell's run that started it (reconcileInCells).
	control *controlRun
}

// controlRun is the control cell's run a cell's run belongs to, and that run's job.
type controlRun struct {
	id      int64
	jobName *string
}

// Reconcile imports a statement and matches it, recording everything on a recon_runs row whose
// progress (rows parsed, loaded, matched) is updated while it works; p gets the same reports.
// A statement whose control totals do not agree is rejected (nothing imported) and recorded as a
// CONTROL_TOTAL_MISMATCH finding of the run; an already imported file is matched again (same
// findings, updated). The run is returned even with an error (nil only when the run row itself
// could not be written).
func (r *Reconciler) Reconcile(ctx context.Context, req RunRequest, src io.Reader, p daemon.Progress) (*Run, error) {
	if p == nil {
		p = daemon.NopProgress{}
	}
	ms := MatchSettings{}
	if req.Job != nil {
		ms = req.Job.MatchSettings()
		if req.Import.Location == nil {
			req.Import.Location = ms.Location
		}
	}
	if req.Match != nil {
		ms = *req.Match
	}
	runID := req.RunID
	if runID == 0 {
		var err error
		if runID, err = r.startRun(ctx, req.Job, req.Import.Channel, req.Import.BillDate, req.Import.Importer, req.control); err != nil {
			return nil, err
		}
	}
	prog := r.newRunProgress(runID, p)
	res, err := r.Import(ctx, req.Import, src, prog)
	prog.flush(ctx)
	switch {
	case errors.Is(err, ErrControlTotal) && res != nil:
		var cte *ControlTotalError
		errors.As(err, &cte)
		if ferr := r.recordControlTotal(ctx, runID, res, cte); ferr != nil {
			return r.finishRun(ctx, runID, RunFailed, nil, ferr)
		}
		return r.finishRun(ctx, runID, RunRejected, map[Kind]int64{ControlTotalMismatch: 1}, err)
	case err != nil:
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	diff, _ := json.Marshal(res.Diff)
	if res.Diff == nil {
		diff = nil
	}
	if err := r.db.WithContext(ctx).Exec(`UPDATE recon_runs SET statement_id = ?, bill_date = ?::date, already_imported = ?,
		diff = ?::jsonb, updated_at = now() WHERE id = ?`, res.StatementID, res.BillDate, res.AlreadyImported, nullable(diff), runID).Error; err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, fmt.Errorf("record statement on run: %w", err))
	}
	mr, err := r.Match(ctx, runID, res.StatementID, ms)
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	prog.Report(PhaseMatch, mr.Matched, mr.Lines)
	prog.flush(ctx)
	return r.finishRun(ctx, runID, RunSucceeded, mr.Counts, nil)
}

func nullable(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// StartRun creates a recon_runs row in status running (job may be nil for an ad hoc import).
func (r *Reconciler) StartRun(ctx context.Context, job *ReconJob, channel, billDate, actor string) (int64, error) {
	return r.startRun(ctx, job, channel, billDate, actor, nil)
}

// startRun is StartRun of a cell's run started by the control cell's run control (nil: none).
func (r *Reconciler) startRun(ctx context.Context, job *ReconJob, channel, billDate, actor string, control *controlRun) (int64, error) {
	var controlID *int64
	var jobName *string
	if control != nil {
		controlID, jobName = &control.id, control.jobName
	}
	var jobID *int64
	if job != nil {
		jobID = &job.ID
		if channel == "" {
			channel = job.Channel
		}
	}
	var date *string
	if billDate != "" {
		date = &billDate
	}
	var id int64
	err := r.db.WithContext(ctx).Raw(`INSERT INTO recon_runs (job_id, channel, bill_date, actor, control_run_id, job_name)
		VALUES (?, ?, ?::date, ?, ?, ?) RETURNING id`, jobID, channel, date, actor, controlID, jobName).Scan(&id).Error
	if err != nil {
		return 0, fmt.Errorf("start recon run: %w", err)
	}
	return id, nil
}

// setRunStatus records a status change of a run still under way (waiting for the statement),
// with its note (why it waits) as English text and as a phrase, as a failed run keeps its error;
// the zero phrase clears both.
func (r *Reconciler) setRunStatus(ctx context.Context, runID int64, st RunStatus, note errs.Phrase) error {
	var msg *string
	if note.Format != "" {
		s := note.String()
		msg = &s
	}
	return r.db.WithContext(ctx).Exec(`UPDATE recon_runs SET status = ?, error = ?, error_phrase = ?::jsonb, updated_at = now() WHERE id = ?`,
		st, msg, errs.Stored(note), runID).Error
}

// errorPhrase is err's one-line text as a phrase: the phrase it carries when that says the whole
// line, else the text as it is.
func errorPhrase(err error) errs.Phrase {
	s := oneLineError(err)
	if p := errs.PhraseOf(err, s); p.Valid {
		return p.Phrase
	}
	return errs.Verbatim(s)
}

// finishRun records the end of a run and returns it with runErr (the run's own error).
func (r *Reconciler) finishRun(ctx context.Context, runID int64, st RunStatus, counts map[Kind]int64, runErr error) (*Run, error) {
	ctx = context.WithoutCancel(ctx) // a cancelled run is still recorded as over
	c := map[string]int64{}
	for k, v := range counts {
		c[string(k)] = v
	}
	cj, _ := json.Marshal(c)
	var msg *string
	var phrase errs.NullPhrase
	if runErr != nil {
		s := oneLineError(runErr)
		msg = &s
		// The phrase is kept when it says the whole error (a line error, a field error).
		phrase = errs.PhraseOf(runErr, s)
	}
	if err := r.db.WithContext(ctx).Exec(`UPDATE recon_runs SET status = ?, counts = ?::jsonb, error = ?, error_phrase = ?::jsonb,
		finished_at = now(), updated_at = now() WHERE id = ?`, st, string(cj), msg, phrase, runID).Error; err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("finish recon run %d: %w", runID, err))
	}
	run, err := r.GetRun(ctx, runID)
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	if runErr != nil {
		level := "recon run failed"
		if st == RunRejected {
			level = "recon run rejected the statement"
		}
		r.cfg.Logger.Warn(level, "run", runID, "channel", run.Channel, "err", oneLineError(runErr))
	} else if len(run.Counts) > 0 {
		r.cfg.Logger.Info("recon run found discrepancies", "run", runID, "channel", run.Channel, "counts", run.Counts)
	}
	return run, runErr
}

// recordControlTotal records the rejected statement as a CONTROL_TOTAL_MISMATCH finding of the
// run, identified by the file's hash (the same file rejected again updates the same finding).
func (r *Reconciler) recordControlTotal(ctx context.Context, runID int64, res *ImportResult, cte *ControlTotalError) error {
	ctx = context.WithoutCancel(ctx)
	if res.BillDate == "" {
		return fmt.Errorf("control totals do not agree and the statement's bill date is unknown: %w", cte)
	}
	detail := map[string]any{"sha256": res.SHA256, "summary_line": cte.Totals.Line, "source": cte.Totals.Source,
		"checks": cte.Totals.Checks, "mismatches": cte.Totals.Mismatches(), "lines": res.Summary.Lines}
	dj, _ := json.Marshal(detail)
	err := r.db.WithContext(ctx).Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail)
		VALUES (?, ?, ?, ?::date, 'CONTROL_TOTAL_MISMATCH', ?, ?::jsonb)
		ON CONFLICT (channel, bill_date, kind, subject) DO UPDATE SET run_id = EXCLUDED.run_id, detail = EXCLUDED.detail, updated_at = now()`,
		runID, runID, res.Channel, res.BillDate, "file:"+res.SHA256, string(dj)).Error
	if err == nil {
		err = r.db.WithContext(ctx).Exec(`UPDATE recon_runs SET bill_date = ?::date WHERE id = ?`, res.BillDate, runID).Error
	}
	if err != nil {
		return fmt.Errorf("record control total finding: %w", err)
	}
	return nil
}

// runColumns fills a Run (with the job's name and the statement's version).
const runColumns = `r.id, r.job_id, coalesce(j.name, r.job_name) AS job_name, r.control_run_id, r.channel, to_char(r.bill_date, 'YYYY-MM-DD') AS bill_date, r.statement_id,
	s.version AS statement_ver, r.status, r.actor, r.already_imported, r.rows_parsed, r.rows_loaded, r.rows_matched,
	r.keys_without_account, r.counts::text AS counts, r.diff::text AS diff, r.error, r.error_phrase::text AS error_phrase, r.started_at, r.updated_at, r.finished_at
	FROM recon_runs r LEFT JOIN recon_jobs j ON j.id = r.job_id LEFT JOIN statements s ON s.id = r.statement_id`

type runRow struct {
	ID                 int64
	JobID              *int64
	JobName            *string
	ControlRunID       *int64
	Channel            string
	BillDate           *string
	StatementID        *int64
	StatementVer       *int
	Status             string
	Actor              string
	AlreadyImported    bool
	RowsParsed         int64
	RowsLoaded         int64
	RowsMatched        int64
	KeysWithoutAccount int64
	Counts             *string
	Diff               *string
	Error              *string
	ErrorPhrase        *string
	StartedAt          time.Time
	UpdatedAt          time.Time
	FinishedAt         *time.Time
}

func (row runRow) run() Run {
	run := Run{ID: row.ID, JobID: row.JobID, JobName: row.JobName, ControlRunID: row.ControlRunID, Channel: row.Channel, BillDate: row.BillDate,
		StatementID: row.StatementID, StatementVer: row.StatementVer, Status: RunStatus(row.Status), Actor: row.Actor,
		AlreadyImported: row.AlreadyImported, RowsParsed: row.RowsParsed, RowsLoaded: row.RowsLoaded, RowsMatched: row.RowsMatched,
		KeysWithoutAccount: row.KeysWithoutAccount, Counts: map[string]int64{}, Error: row.Error, StartedAt: row.StartedAt, UpdatedAt: row.UpdatedAt, FinishedAt: row.FinishedAt}
	if row.Counts != nil {
		_ = json.Unmarshal([]byte(*row.Counts), &run.Counts)
	}
	if row.Diff != nil {
		run.Diff = &VersionDiff{}
		_ = json.Unmarshal([]byte(*row.Diff), run.Diff)
	}
	if row.ErrorPhrase != nil {
		if p := new(errs.Phrase); json.Unmarshal([]byte(*row.ErrorPhrase), p) == nil {
			run.ErrorPhrase = p
		}
	}
	return run
}

// GetRun reads one run. Errors: ErrNotFound.
func (r *Reconciler) GetRun(ctx context.Context, id int64) (*Run, error) {
	var rows []runRow
	if err := r.db.WithContext(ctx).Raw(`SELECT `+runColumns+` WHERE r.id = ?`, id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("recon run %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("recon run %d: %w", id, ErrNotFound)
	}
	run := rows[0].run()
	return &run, nil
}

// RunFilter selects runs, newest first.
type RunFilter struct {
	Job string // job name; empty: all
	// BeforeID continues a listing after its last row (keyset paging); 0: from the newest.
	BeforeID int64
	Limit    int // default 50, at most MaxRunsListed
	// Whole leaves out the runs that are a cell's part of another run (ControlRunID set): in a
	// deployment of cells the control cell's run stands for them, with their counts summed.
	Whole bool
	// PartsOf, when set, lists only the cells' parts of these runs (recon_runs_control_run_idx).
	PartsOf []int64
}

// MaxRunsListed bounds a page of ListRuns.
const MaxRunsListed = 500

// ListRuns lists runs newest first with their progress and counts per kind
// (recon_runs_listing_idx / recon_runs_job_idx serve it).
func (r *Reconciler) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, MaxRunsListed)
	q := r.db.WithContext(ctx)
	sqlText := `SELECT ` + runColumns + ` WHERE (?::bigint = 0 OR r.id < ?)` // bigint: a cell's ids are past int4
	args := []any{f.BeforeID, f.BeforeID}
	if f.Job != "" {
		sqlText += ` AND j.name = ?`
		args = append(args, f.Job)
	}
	if f.Whole {
		sqlText += ` AND r.control_run_id IS NULL`
	}
	if len(f.PartsOf) > 0 {
		sqlText += ` AND r.control_run_id = ANY(?::bigint[])`
		args = append(args, int64Array(f.PartsOf))
	}
	sqlText += ` ORDER BY r.id DESC LIMIT ?`
	args = append(args, f.Limit)
	var rows []runRow
	if err := q.Raw(sqlText, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list recon runs: %w", err)
	}
	out := make([]Run, len(rows))
	for i, row := range rows {
		out[i] = row.run()
	}
	return out, nil
}

// runProgress keeps a run's progress columns current (at most every ProgressInterval) and
// forwards every report to the caller's Progress.
type runProgress struct {
	r     *Reconciler
	runID int64
	next  daemon.Progress

	mu                      sync.Mutex
	parsed, loaded, matched int64
	last                    time.Time
	dirty                   bool
}

func (r *Reconciler) newRunProgress(runID int64, next daemon.Progress) *runProgress {
	return &runProgress{r: r, runID: runID, next: next}
}

func (p *runProgress) Report(phase string, done, total int64) {
	p.next.Report(phase, done, total)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch phase {
	case PhaseParse:
		p.parsed = done
	case PhaseLoad:
		p.loaded = done
	case PhaseMatch:
		p.matched = done
	default:
		return
	}
	p.dirty = true
	if time.Since(p.last) >= p.r.cfg.ProgressInterval {
		p.writeLocked(context.Background())
	}
}

func (p *runProgress) flush(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirty {
		p.writeLocked(context.WithoutCancel(ctx))
	}
}

// writeLocked writes the counters on the pool, outside the import's transaction, so readers see
// them while the import is still open. A failed progress write is not worth failing the run.
func (p *runProgress) writeLocked(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.last, p.dirty = time.Now(), false
	err := p.r.db.WithContext(ctx).Exec(`UPDATE recon_runs SET rows_parsed = ?, rows_loaded = ?, rows_matched = ?, updated_at = now()
		WHERE id = ?`, p.parsed, p.loaded, p.matched, p.runID).Error
	if err != nil {
		p.r.cfg.Logger.Warn("recon run progress not recorded", "run", p.runID, "err", err)
	}
}
