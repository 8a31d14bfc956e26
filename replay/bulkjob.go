package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/tenantdb"
)

// BulkJobName is the daemon job that works through started bulk replays.
const BulkJobName = "replay.bulk"

// BulkJobSpec is its default schedule: starting a run asks for a pass at once (daemon.RunNow);
// the regular pass takes runs started while no daemon ran, and runs whose job run was abandoned.
const BulkJobSpec = "@every 10s"

// bulkRunsPerPass bounds the runs one pass works through.
const bulkRunsPerPass = 20

// bulkMaxChecks bounds how often the job looks again at one parked key; after that the key
// stays parked for an operator to replay by hand.
const bulkMaxChecks = 5

// BulkJob replays the keys of started bulk runs (daemon.Job). Each pass takes the oldest run
// that no running job run holds — a new one, or one whose job run ended without finishing it
// (abandoned after a crash, a stop or a lost leadership) — records its own job run on it, and
// replays its keys that have no result yet, one at a time, recording each key's result once.
type BulkJob struct{ w *Workflow }

// NewBulkJob returns the job over w.
func NewBulkJob(w *Workflow) *BulkJob { return &BulkJob{w: w} }

// Name is BulkJobName.
func (j *BulkJob) Name() string { return BulkJobName }

// Collectors are the workflow's metrics (daemon.Instrumented).
func (j *BulkJob) Collectors() []prometheus.Collector { return j.w.Collectors() }

// RunOnce works through up to bulkRunsPerPass runs (daemon.BulkPass). It stops between keys
// when the daemon asks (daemon.ErrStopped): the run stays running and the next pass resumes it.
func (j *BulkJob) RunOnce(ctx context.Context, _ []byte, p daemon.Progress) (daemon.Stats, error) {
	return daemon.BulkPass(ctx, BulkJobName, bulkRunsPerPass,
		// Any operator's run is the daemon's to take; its keys are replayed under the tenants
		// of the operator who started it (row-level security on a console's handle).
		func(ctx context.Context, jobRun int64) (*takenRun, error) {
			return j.w.takeBulkRun(tenantdb.WithTenants(ctx, []string{tenantdb.AllTenants}), jobRun)
		},
		func(ctx context.Context, run *takenRun, stats daemon.Stats) error {
			if run.ResumedFrom != nil {
				stats["resumed"]++
			}
			return j.w.workBulk(tenantdb.WithTenants(ctx, run.actor().Tenants), run, p, stats)
		})
}

// takenRun is a bulk run a pass took, with what it acts under.
type takenRun struct {
	ID          int64
	OperatorID  int64
	Operator    string
	Reason      *string
	Tenants     string // JSON array
	IP          *string
	ResumedFrom *int64 // the job run that held it before, when this pass resumes it
	Waited      bool   // the run was waiting for its parked keys' re-check, now due
}

func (r *takenRun) actor() Actor {
	a := Actor{ID: r.OperatorID, Name: r.Operator}
	_ = json.Unmarshal([]byte(r.Tenants), &a.Tenants)
	if r.IP != nil {
		a.IP = *r.IP
	}
	return a
}

// takeBulkSQL takes for jobRun $1 the oldest running bulk run that no running job run holds, or
// a waiting one whose re-check is due, and marks it running (replay_bulk_runs_running_idx,
// _waiting_idx; SKIP LOCKED: two passes never take one run).
const takeBulkSQL = `
WITH prev AS (
    SELECT r.id, r.job_run_id, r.state FROM replay_bulk_runs r
    WHERE (r.state = 'running'
           AND (r.job_run_id IS NULL
                OR NOT EXISTS (SELECT 1 FROM job_runs j WHERE j.id = r.job_run_id AND j.status = 'running')))
       OR (r.state = 'waiting' AND r.recheck_at <= now())
    ORDER BY r.id LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE replay_bulk_runs b SET job_run_id = ?, state = 'running', recheck_at = NULL, updated_at = now()
FROM prev WHERE b.id = prev.id
RETURNING b.id, b.operator_id, b.operator, b.reason, COALESCE(array_to_json(b.tenants)::text, '[]') AS tenants, b.ip,
          CASE WHEN prev.state = 'running' THEN prev.job_run_id END AS resumed_from, prev.state = 'waiting' AS waited`

func (w *Workflow) takeBulkRun(ctx context.Context, jobRun int64) (*takenRun, error) {
	qctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	var rows []takenRun
	if err := w.db.WithContext(qctx).Raw(takeBulkSQL, jobRun).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("take a bulk run: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// workBulk replays the keys of run that have no result yet, recording each result once, and
// finishes the run. A failed read of its items finishes it failed, with the error.
func (w *Workflow) workBulk(ctx context.Context, run *takenRun, p daemon.Progress, stats daemon.Stats) error {
	log := w.log.With("bulk_run", run.ID)
	if run.ResumedFrom != nil {
		log.Info("bulk replay resumed", "abandoned_job_run", *run.ResumedFrom)
	}
	if run.Waited {
		if err := w.reopenParked(ctx, run); err != nil {
			return err
		}
	}
	items, err := w.BulkItems(ctx, run.ID)
	if err != nil {
		if ferr := w.finishBulk(ctx, run, "failed", nil, err.Error()); ferr != nil {
			log.Error("bulk replay: finish after a failed read", "err", ferr)
		}
		return err
	}
	results := map[string]int{}
	done := int64(0)
	for _, it := range items {
		if it.Result != nil {
			results[*it.Result]++
			done++
		}
	}
	total := int64(len(items))
	a := run.actor()
	for _, it := range items {
		if it.DoneAt != nil {
			continue
		}
		if daemon.ShouldStop(ctx) {
			return daemon.ErrStopped
		}
		result, why, reqID := w.bulkReplayOne(ctx, a, run, it)
		if ctx.Err() != nil {
			// Cancelled inside the key (timeout, abrupt stop): what it says may be the
			// cancellation's, not the key's. The next pass answers for it from its request.
			return ctx.Err()
		}
		recorded, err := w.recordItem(ctx, run.ID, it.Seq, result, why, reqID, results)
		if err != nil {
			return err
		}
		if recorded {
			done++
			stats["keys"]++
		}
		p.Report("replaying", done, total)
	}
	next, err := w.nextRecheck(ctx, run.ID)
	if err != nil {
		return err
	}
	if next != nil {
		return w.waitBulk(ctx, run, *next, results)
	}
	return w.finishBulk(ctx, run, "done", results, "")
}

// nextRecheck is when the run's earliest parked key is due for its next look (nil: none is).
func (w *Workflow) nextRecheck(ctx context.Context, runID int64) (*time.Time, error) {
	var row struct{ Next *time.Time }
	if err := w.db.WithContext(context.WithoutCancel(ctx)).Raw(`SELECT min(recheck_at) AS next FROM replay_bulk_items WHERE run_id = ? AND recheck_at IS NOT NULL`,
		runID).Scan(&row).Error; err != nil {
		return nil, fmt.Errorf("bulk run %d: next re-check: %w", runID, err)
	}
	return row.Next, nil
}

// waitBulk leaves a run whose keys are all looked at, some parked, waiting for the first
// re-check: not done while a key waits.
func (w *Workflow) waitBulk(ctx context.Context, run *takenRun, at time.Time, results map[string]int) error {
	err := w.db.WithContext(context.WithoutCancel(ctx)).Exec(`UPDATE replay_bulk_runs SET state = 'waiting', recheck_at = ?, updated_at = now()
		WHERE id = ? AND state = 'running'`, at, run.ID).Error
	if err != nil {
		return fmt.Errorf("bulk run %d: wait for its parked keys: %w", run.ID, err)
	}
	w.log.Info("bulk replay waits for its parked keys", "bulk_run", run.ID, "recheck_at", at, "results", results)
	return nil
}

// reopenParked makes the run's parked keys whose re-check is due keys to replay again (their
// result cleared, one more check counted), recounts the run's progress from its items, and
// audits the re-check (replay.recheck), all at once.
func (w *Workflow) reopenParked(ctx context.Context, run *takenRun) error {
	ctx = context.WithoutCancel(ctx)
	return w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE replay_bulk_items SET result = NULL, detail = NULL, detail_phrase = NULL, request_id = NULL, done_at = NULL,
			recheck_at = NULL, checks = checks + 1 WHERE run_id = ? AND recheck_at IS NOT NULL AND recheck_at <= now()`, run.ID)
		if res.Error != nil {
			return fmt.Errorf("bulk run %d: reopen parked keys: %w", run.ID, res.Error)
		}
		if err := tx.Exec(`UPDATE replay_bulk_runs SET
			processed = (SELECT count(*) FROM replay_bulk_items WHERE run_id = ? AND done_at IS NOT NULL),
			results = COALESCE((SELECT jsonb_object_agg(result, n) FROM (SELECT result, count(*) AS n FROM replay_bulk_items
				WHERE run_id = ? AND result IS NOT NULL GROUP BY result) g), '{}'), updated_at = now()
			WHERE id = ?`, run.ID, run.ID, run.ID).Error; err != nil {
			return fmt.Errorf("bulk run %d: recount: %w", run.ID, err)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return w.audit.Append(ctx, tx, audit.Entry{Actor: run.actor().Ref(), IP: run.actor().IP, Action: "replay.recheck",
			Target: fmt.Sprintf("bulk:%d", run.ID), Detail: map[string]any{"keys": res.RowsAffected}})
	})
}

// recordItem records one key's result and the run's progress, once: an item another pass
// recorded already keeps its result (recorded false). The detail is stored as English text
// (why's String) and, when why is Valid, as the phrase a console says in its operator's language.
func (w *Workflow) recordItem(ctx context.Context, runID int64, seq int, result string, why errs.NullPhrase, reqID *int64, results map[string]int) (bool, error) {
	ctx = context.WithoutCancel(ctx)
	var recorded bool
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// A parked key is looked at again when its quarantine or backoff ends (its lease),
		// until its checks are used up.
		res := tx.Exec(`UPDATE replay_bulk_items SET result = ?, detail = ?, detail_phrase = ?::jsonb, request_id = ?, done_at = now(),
			recheck_at = CASE WHEN ? AND checks < ? THEN
				(SELECT GREATEST(COALESCE(k.lease_expires_at, now()), now()) FROM idempotency_keys k WHERE k.id = replay_bulk_items.key_id) END
			WHERE run_id = ? AND seq = ? AND done_at IS NULL`, result, why.Phrase.String(), why, reqID, parkedResult(result), bulkMaxChecks, runID, seq)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		recorded = true
		results[result]++
		resultsJSON, _ := json.Marshal(results)
		return tx.Exec(`UPDATE replay_bulk_runs SET processed = processed + 1, results = ?, updated_at = now() WHERE id = ?`,
			string(resultsJSON), runID).Error
	})
	if err != nil {
		if recorded {
			results[result]--
		}
		return false, fmt.Errorf("record bulk item %d/%d: %w", runID, seq, err)
	}
	return recorded, nil
}

// finishBulk ends a running run with state (done, failed), audited once.
func (w *Workflow) finishBulk(ctx context.Context, run *takenRun, state string, results map[string]int, errText string) error {
	fin := context.WithoutCancel(ctx)
	var errArg any
	if errText != "" {
		errArg = truncate(errText, 1000)
	}
	// The row's tenants are its keys'. A run whose items cannot be read still ends, audited under
	// its starter's tenants: those cover every key the starter could select, so the row is shown
	// to no administrator outside them.
	tenants, err := bulkTenants(w.db.WithContext(fin), run.ID)
	if err != nil {
		tenants = run.actor().Tenants
	}
	err = w.db.WithContext(fin).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE replay_bulk_runs SET state = ?, error = ?, finished_at = now(), updated_at = now()
			WHERE id = ? AND state = 'running'`, state, errArg, run.ID)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		detail := map[string]any{"state": state, "results": results}
		if errText != "" {
			detail["error"] = errArg
		}
		return w.audit.Append(fin, tx, audit.Entry{Actor: run.actor().Ref(), IP: run.actor().IP, Action: "replay.bulk_done",
			Target: fmt.Sprintf("bulk:%d", run.ID), Tenants: tenants, Detail: detail})
	})
	if err != nil {
		return fmt.Errorf("finish bulk run %d: %w", run.ID, err)
	}
	w.log.Info("bulk replay finished", "bulk_run", run.ID, "state", state, "results", results)
	return nil
}

// bulkReplayOne replays one key of a run and says what happened: the request's outcome kind,
// "pending_approval", "refused" with the guard's reason, or "interrupted", and the detail (the
// request's outcome, when it has one). A request made before the outcome's phrase was stored
// lends its English text as it is.
func (w *Workflow) bulkReplayOne(ctx context.Context, a Actor, run *takenRun, it BulkItem) (string, errs.NullPhrase, *int64) {
	qctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	k, err := w.claims.Get(qctx, it.KeyID)
	cancel()
	switch {
	case errors.Is(err, claim.ErrNotFound) || err == nil && !a.MaySee(k.Tenant):
		return "refused", errs.Stored(errs.Phrasef("the key is gone (purged) or no longer visible to you")), nil
	case err != nil:
		w.log.Error("bulk replay: read key", "bulk_run", run.ID, "key", it.KeyID, "err", err)
		return "error", errs.Stored(errs.Phrasef("the key could not be read; the error was logged")), nil
	}
	// One token per (run, item, key): a pass that resumes a run finds the request an earlier
	// pass made for this key instead of replaying it again.
	token := tokenHash("bulk", strconv.FormatInt(run.ID, 10), strconv.Itoa(it.Seq), strconv.FormatInt(it.KeyID, 10))
	version, predicted := it.KeyVersion, Prediction(it.Predicted)
	if it.Checks > 0 {
		// A re-check of a parked key: its own request, made as an operator would replay it
		// again — at the key's version now, on what downstream says now.
		token = tokenHash("bulk", strconv.FormatInt(run.ID, 10), strconv.Itoa(it.Seq), strconv.FormatInt(it.KeyID, 10), "check", strconv.Itoa(it.Checks))
		var why errs.Phrase
		version = k.Version
		if predicted, why = w.predict(ctx, a, k); predicted == PredictRefused {
			return "refused", errs.Stored(why), nil
		}
	}
	prior, err := w.requestWhere(ctx, "token_hash = ?", token)
	if err != nil {
		w.log.Error("bulk replay: key", "bulk_run", run.ID, "digest", k.KeyDigest, "err", err)
		return "error", errs.Stored(errs.Phrasef("the replay failed; the error was logged")), nil
	}
	var req *Request
	switch {
	case prior != nil:
		req, err = w.resume(ctx, a, k, prior)
	default:
		reason := ""
		if run.Reason != nil {
			reason = *run.Reason
		}
		req, _, err = w.request(ctx, ask{actor: a, key: k, version: version, token: token, reason: reason, bulkRun: &run.ID,
			predicted: predicted})
	}
	var re *errs.RefusedError
	switch {
	case errors.As(err, &re):
		return "refused", errs.Stored(re.Phrasing()), nil
	case err != nil:
		w.log.Error("bulk replay: key", "bulk_run", run.ID, "digest", k.KeyDigest, "err", err)
		return "error", errs.Stored(errs.Phrasef("the replay failed; the error was logged")), nil
	case req.State == "pending":
		return "pending_approval", errs.Stored(errs.Phrasef("above the approval amount: waiting for a second operator (request %d)", req.ID)), &req.ID
	}
	kind, why := "error", req.OutcomePhrase
	if req.OutcomeKind != nil {
		kind = *req.OutcomeKind
	}
	if !why.Valid && req.Outcome != nil { // its text only: stored as the detail, no phrase
		why = errs.NullPhrase{Phrase: errs.Verbatim(*req.Outcome)}
	}
	return kind, why, &req.ID
}

// resume answers for a key whose request an earlier pass made: one approved but not started is
// executed now; one left executing (the pass died inside the replay) is finished as
// interrupted — never replayed again: its takeover moved the key's version, and the key's lease
// lapses to the reclaimer, which looks downstream up first.
func (w *Workflow) resume(ctx context.Context, a Actor, k *claim.Key, r *Request) (*Request, error) {
	switch r.State {
	case "approved":
		return w.execute(ctx, r.ID, a.IP, false)
	case "executing":
		return w.finish(ctx, r, a.IP, "failed", "interrupted", errs.Phrasef(
			"interrupted: the daemon stopped while this replay ran; it was not repeated (the key is now %s)", errs.Verbatim(string(k.State))))
	}
	return r, nil
}
