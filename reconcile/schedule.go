package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// JobName is the daemon job name of reconciliation; its schedule params are JobParams.
const JobName = "reconcile"

// JobParams are the parameters of a "reconcile" schedule.
type JobParams struct {
	Job  string `json:"job"`            // the recon job's name
	Date string `json:"date,omitempty"` // bill date YYYY-MM-DD; empty: today minus the job's offset
}

// Job runs recon jobs for the daemon (daemon.Job). The integrator mirrors each recon job into
// the daemon's schedules as {name: "reconcile", params: {"job": NAME}, cron_spec, time_zone}.
type Job struct{ r *Reconciler }

// NewJob returns the daemon job that runs recon jobs with r.
func NewJob(r *Reconciler) *Job { return &Job{r: r} }

var _ daemon.Job = (*Job)(nil)

// Name implements daemon.Job.
func (j *Job) Name() string { return JobName }

// RunOnce implements daemon.Job: it runs the recon job named in params (a disabled job does
// nothing) and returns the lines loaded and the findings per kind.
func (j *Job) RunOnce(ctx context.Context, params []byte, p daemon.Progress) (daemon.Stats, error) {
	var jp JobParams
	if len(params) > 0 {
		if err := json.Unmarshal(params, &jp); err != nil {
			return nil, invalidf("params", "not a JSON object {\"job\": NAME, \"date\": YYYY-MM-DD}: %v", err)
		}
	}
	if jp.Job == "" {
		return nil, invalidf("params.job", "must name a recon job")
	}
	job, err := j.r.GetJob(ctx, jp.Job)
	if err != nil {
		return nil, err
	}
	if !job.Enabled {
		return daemon.Stats{}, nil
	}
	run, err := j.r.RunJob(ctx, job, jp.Date, "daemon", p)
	if run == nil {
		return nil, err
	}
	stats := daemon.Stats{"lines_loaded": run.RowsLoaded, "lines_matched": run.RowsMatched}
	for k, v := range run.Counts {
		stats[strings.ToLower(k)] = v
	}
	return stats, err
}

// RunJob runs one recon job for one bill date (empty: today in the job's zone minus its
// offset) on behalf of actor: it creates the run, fetches the statement — retrying "not ready
// yet" with backoff until the job's ready deadline, the run showing status waiting meanwhile —
// then imports and matches it. A statement still missing at the deadline fails the run with
// ErrNotReady. The run is returned with any error (nil only if it could not be created).
func (r *Reconciler) RunJob(ctx context.Context, job *ReconJob, billDate, actor string, p daemon.Progress) (*Run, error) {
	if p == nil {
		p = daemon.NopProgress{}
	}
	if billDate == "" {
		billDate = job.BillDate(r.cfg.Now())
	} else if _, err := time.Parse(time.DateOnly, billDate); err != nil {
		return nil, invalidf("date", "%q is not YYYY-MM-DD", billDate)
	}
	runID, err := r.StartRun(ctx, job, job.Channel, billDate, actor)
	if err != nil {
		return nil, err
	}
	account, err := r.channelAccount(ctx, job.Channel)
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	fetcher := r.fetcherFor(job, account)
	deadline := r.cfg.Now().Add(time.Duration(job.ReadyDeadlineSeconds) * time.Second)
	backoff := r.cfg.RetryBackoff
	var src *Fetched
	for attempt := 1; ; attempt++ {
		src, err = fetcher.Fetch(ctx, FetchRequest{Job: job, Account: account, BillDate: billDate})
		if err == nil || !errors.Is(err, ErrNotReady) {
			break
		}
		if !r.cfg.Now().Add(backoff).Before(deadline) {
			// The fetcher's line already says "statement not ready: " and the channel's reason;
			// the deadline follows it, so the line says "not ready" once (a job that does not
			// wait has only the fetcher's line).
			if attempt > 1 {
				err = errs.Errorf("%w; gave up at the ready deadline (%s) after %d attempts", err,
					time.Duration(job.ReadyDeadlineSeconds)*time.Second, attempt)
			}
			break
		}
		_ = r.setRunStatus(ctx, runID, RunWaiting, errs.Phrasef("attempt %d: %s; retrying in %s", attempt, errorPhrase(err), backoff))
		p.Report("waiting", int64(attempt), 0)
		select {
		case <-ctx.Done():
			return r.finishRun(ctx, runID, RunFailed, nil, fmt.Errorf("%w: cancelled while waiting: %v", ErrNotReady, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.cfg.RetryBackoffMax)
	}
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	defer src.close()
	if src.Note != "" {
		r.cfg.Logger.Info("reconcile: statement fetched", "job", job.Name, "fetcher", fetcher.Name(), "bill_date", billDate, "how", src.Note)
	}
	if err := r.setRunStatus(ctx, runID, RunRunning, errs.Phrase{}); err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	req := RunRequest{Job: job, RunID: runID, Import: ImportRequest{Channel: job.Channel, Format: job.Format,
		BillDate: billDate, Location: job.Location(), Importer: actor, SHA256: src.sha, Size: src.size}}
	if r.cfg.Cells != nil { // a deployment of cells: matched in the cells of the account's tenants
		read := func(ctx context.Context, rec *Reconciler, req RunRequest, p daemon.Progress) (*Run, error) {
			return rec.ReconcilePacked(ctx, req, src.f, src.size, p)
		}
		return r.reconcileInCells(ctx, runID, job, account, job.MatchSettings(), req, read, p)
	}
	return r.ReconcilePacked(ctx, req, src.f, src.size, p)
}

// ExpandSource puts the bill date into a job's source pattern.
func ExpandSource(source, billDate string) string {
	return strings.NewReplacer("{date}", billDate, "{yyyymmdd}", strings.ReplaceAll(billDate, "-", "")).Replace(source)
}
