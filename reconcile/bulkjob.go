package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/tenantdb"
)

// BulkJobName is the daemon job that works through running bulk runs of findings.
const BulkJobName = "reconcile.findings_bulk"

// BulkJobSpec is its schedule: starting (or approving) a run asks for a pass at once
// (daemon.RunNow); the regular pass takes runs started while no daemon ran, and runs whose job
// run was abandoned.
const BulkJobSpec = "@every 10s"

// bulkBatch is how many findings one transaction of a resolve or ignore run closes: their
// updates, their audit rows and the run's progress commit together.
const bulkBatch = 1000

// bulkRunsPerPass bounds the runs one pass works through.
const bulkRunsPerPass = 10

// BulkJob works through bulk runs of findings (daemon.Job): each pass takes the oldest running
// run that no running job run holds — a new one, or one whose job run ended without finishing it
// (a crash, a stop, a lost leadership) — records its job run on it, and does the findings that
// have no result yet. Resolve and ignore close bulkBatch findings per transaction (a finding no
// longer open is skipped); recover recovers one finding at a time through the claim logic
// (Recover: it looks the charge up and never executes one).
type BulkJob struct{ r *Reconciler }

// NewBulkJob returns the job over r (whose Auditor must record batches).
func NewBulkJob(r *Reconciler) *BulkJob { return &BulkJob{r: r} }

var _ daemon.Job = (*BulkJob)(nil)

// Name is BulkJobName.
func (j *BulkJob) Name() string { return BulkJobName }

// RunOnce works through up to bulkRunsPerPass runs (daemon.BulkPass); it stops between batches
// when the daemon asks (daemon.ErrStopped): the run stays running and the next pass resumes it.
func (j *BulkJob) RunOnce(ctx context.Context, _ []byte, p daemon.Progress) (daemon.Stats, error) {
	return daemon.BulkPass(ctx, BulkJobName, bulkRunsPerPass,
		// Any operator's run is the daemon's to take; its findings are worked under the run's
		// tenants, those its starter and approver covered (row-level security on a console's handle).
		func(ctx context.Context, jobRun int64) (*BulkRun, error) {
			return j.r.takeBulkRun(tenantdb.WithTenants(ctx, []string{tenantdb.AllTenants}), jobRun)
		},
		func(ctx context.Context, run *BulkRun, stats daemon.Stats) error {
			return j.r.workBulk(tenantdb.WithTenants(ctx, run.Tenants), run, p, stats)
		})
}

// takeBulkSQL takes the oldest running run that no running job run holds, for job run $1
// (finding_bulk_runs_running_idx; SKIP LOCKED: two passes never take one run).
const takeBulkSQL = `
WITH prev AS (
    SELECT r.id FROM finding_bulk_runs r
    WHERE r.state = 'running'
      AND (r.job_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM job_runs j WHERE j.id = r.job_run_id AND j.status = 'running'))
    ORDER BY r.id LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE finding_bulk_runs b SET job_run_id = ?, updated_at = now() FROM prev WHERE b.id = prev.id RETURNING b.id`

func (r *Reconciler) takeBulkRun(ctx context.Context, jobRun int64) (*BulkRun, error) {
	var ids []int64
	if err := r.db.WithContext(ctx).Raw(takeBulkSQL, jobRun).Scan(&ids).Error; err != nil {
		return nil, fmt.Errorf("take a bulk run: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return r.GetBulkRun(ctx, ids[0])
}

// workBulk does what is left of run and finishes it.
func (r *Reconciler) workBulk(ctx context.Context, run *BulkRun, p daemon.Progress, stats daemon.Stats) error {
	ba, ok := r.cfg.Auditor.(BatchAuditor)
	if !ok {
		return r.finishBulk(ctx, run, BulkFailed, "the reconciler has no Auditor that records batches", nil)
	}
	processed := run.Processed
	for {
		if daemon.ShouldStop(ctx) {
			return daemon.ErrStopped
		}
		var n int64
		var err error
		if run.Action == ActionRecover {
			n, err = r.recoverBatch(ctx, run)
		} else {
			n, err = r.closeBatch(ctx, run, ba)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // the next pass resumes it
			}
			return r.finishBulk(ctx, run, BulkFailed, oneLineError(err), ba)
		}
		if n == 0 {
			return r.finishBulk(ctx, run, BulkDone, "", ba)
		}
		processed += n
		stats["findings"] += n
		p.Report(run.Action, processed, run.Total)
	}
}

// closeBatch resolves or ignores the next bulkBatch findings of run in one transaction: the
// open ones are closed and audited one row each, the others (closed meanwhile) skipped; the
// items and the run's progress are recorded with them. It returns how many items it did.
func (r *Reconciler) closeBatch(ctx context.Context, run *BulkRun, ba BatchAuditor) (int64, error) {
	state, result := FindingResolved, "resolved"
	if run.Action == ActionIgnore {
		state, result = FindingIgnored, "ignored"
	}
	actor := "operator:" + run.Operator
	var done int64
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`SELECT finding_id FROM finding_bulk_items WHERE run_id = ? AND result IS NULL ORDER BY finding_id LIMIT ?`,
			run.ID, bulkBatch).Scan(&ids).Error; err != nil {
			return fmt.Errorf("bulk run %d: next findings: %w", run.ID, err)
		}
		if len(ids) == 0 {
			return nil
		}
		var closed []struct {
			ID       int64
			Kind     string
			Channel  string
			BillDate string
			KeyID    *int64
			Tenant   *string
		}
		if err := tx.Raw(`UPDATE discrepancies d SET state = ?, resolver = ?, reason_code = ?, note = ?, resolved_at = now(),
			updated_at = now() WHERE d.id = ANY(?::bigint[]) AND d.state = 'open'
			RETURNING d.id, d.kind, d.channel, to_char(d.bill_date, 'YYYY-MM-DD') AS bill_date, d.key_id, d.tenant`,
			string(state), actor, run.ReasonCode, run.Note, int64Array(ids)).Scan(&closed).Error; err != nil {
			return fmt.Errorf("bulk run %d: close findings: %w", run.ID, err)
		}
		var channels []string
		for _, c := range closed {
			if c.Tenant == nil {
				channels = append(channels, c.Channel)
			}
		}
		chTenants, err := ChannelTenants(ctx, tx, channels)
		if err != nil {
			return err
		}
		entries := make([]AuditEntry, len(closed))
		closedIDs := make([]int64, len(closed))
		for i, c := range closed {
			detail := map[string]any{"kind": c.Kind, "channel": c.Channel, "bill_date": c.BillDate, "state": string(state),
				"reason_code": run.ReasonCode, "note": run.Note, "bulk_run": run.ID}
			if c.KeyID != nil {
				detail["key_id"] = *c.KeyID
			}
			tenants := chTenants[c.Channel]
			if c.Tenant != nil {
				tenants = []string{*c.Tenant}
			}
			entries[i] = AuditEntry{Actor: actor, IP: run.IP, Action: "reconcile.finding." + run.Action,
				Target: fmt.Sprintf("finding:%d", c.ID), Tenants: tenants, Detail: detail}
			closedIDs[i] = c.ID
		}
		if err := ba.RecordBatch(ctx, tx, entries); err != nil {
			return fmt.Errorf("bulk run %d: audit: %w", run.ID, err)
		}
		if err := tx.Exec(`UPDATE finding_bulk_items SET result = CASE WHEN finding_id = ANY(?::bigint[]) THEN ? ELSE 'skipped' END
			WHERE run_id = ? AND finding_id = ANY(?::bigint[])`, int64Array(closedIDs), result, run.ID, int64Array(ids)).Error; err != nil {
			return fmt.Errorf("bulk run %d: record items: %w", run.ID, err)
		}
		if err := addBulkResults(tx, run.ID, map[string]int64{result: int64(len(closed)), "skipped": int64(len(ids) - len(closed))}); err != nil {
			return err
		}
		done = int64(len(ids))
		return nil
	})
	return done, err
}

// recoverBatch recovers the next few findings of run one at a time through Recover (which
// audits each attempt): recovered, or failed with why (recover does not apply, or the channel's
// lookup did not find the charge), or skipped when no longer open.
func (r *Reconciler) recoverBatch(ctx context.Context, run *BulkRun) (int64, error) {
	var ids []int64
	if err := r.db.WithContext(ctx).Raw(`SELECT finding_id FROM finding_bulk_items WHERE run_id = ? AND result IS NULL
		ORDER BY finding_id LIMIT 20`, run.ID).Scan(&ids).Error; err != nil {
		return 0, fmt.Errorf("bulk run %d: next findings: %w", run.ID, err)
	}
	for _, id := range ids {
		if daemon.ShouldStop(ctx) {
			return 0, daemon.ErrStopped
		}
		result, detail := "recovered", ""
		_, err := r.Recover(ctx, id, run.Operator, run.Note)
		switch {
		case errors.Is(err, ErrClosed):
			result = "skipped"
		case errors.Is(err, ErrCannotRecover) || errors.Is(err, ErrNotFound):
			result, detail = "failed", oneLineError(err)
		case err != nil:
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			result, detail = "failed", oneLineError(err)
		}
		err = r.db.WithContext(context.WithoutCancel(ctx)).Transaction(func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE finding_bulk_items SET result = ?, detail = NULLIF(?, '') WHERE run_id = ? AND finding_id = ? AND result IS NULL`,
				result, truncateText(detail, 500), run.ID, id)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			return addBulkResults(tx, run.ID, map[string]int64{result: 1})
		})
		if err != nil {
			return 0, fmt.Errorf("bulk run %d: record finding %d: %w", run.ID, id, err)
		}
	}
	return int64(len(ids)), nil
}

// addBulkResults adds counts to a run's results and its progress.
func addBulkResults(tx *gorm.DB, runID int64, add map[string]int64) error {
	var n int64
	for _, v := range add {
		n += v
	}
	b, _ := json.Marshal(add)
	if err := tx.Exec(`UPDATE finding_bulk_runs SET processed = processed + ?, updated_at = now(),
		results = (SELECT jsonb_object_agg(k, COALESCE((results->>k)::bigint, 0) + COALESCE((a->>k)::bigint, 0))
		           FROM jsonb_object_keys(results || a) k)
		FROM (SELECT ?::jsonb AS a) x WHERE id = ?`, n, string(b), runID).Error; err != nil {
		return fmt.Errorf("bulk run %d: progress: %w", runID, err)
	}
	return nil
}

// finishBulk ends a running run (done or failed, with why), audited once.
func (r *Reconciler) finishBulk(ctx context.Context, run *BulkRun, state, why string, ba BatchAuditor) error {
	ctx = context.WithoutCancel(ctx)
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE finding_bulk_runs SET state = ?, error = NULLIF(?, ''), finished_at = now(), updated_at = now()
			WHERE id = ? AND state = 'running'`, state, truncateText(why, 1000), run.ID)
		if res.Error != nil || res.RowsAffected == 0 || ba == nil {
			return res.Error
		}
		var results string
		if err := tx.Raw(`SELECT results::text FROM finding_bulk_runs WHERE id = ?`, run.ID).Scan(&results).Error; err != nil {
			return err
		}
		detail := map[string]any{"state": state, "results": json.RawMessage(results)}
		if why != "" {
			detail["error"] = why
		}
		return ba.RecordBatch(ctx, tx, []AuditEntry{{Actor: "operator:" + run.Operator, IP: run.IP, Action: "reconcile.findings.bulk_done",
			Target: fmt.Sprintf("finding-bulk:%d", run.ID), Tenants: run.Tenants, Detail: detail}})
	})
	if err != nil {
		return fmt.Errorf("finish bulk run %d: %w", run.ID, err)
	}
	r.cfg.Logger.Info("bulk run of findings finished", "bulk_run", run.ID, "action", run.Action, "state", state)
	return nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
