package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// In a deployment of cells (package cells) every tenant's keys live in one cell's database,
// while channel accounts, their credentials and recon jobs live in the control cell's. A job's
// statement is fetched once, by the control cell's reconciler, then imported into every cell
// holding one of its channel account's tenants and matched there against that cell's keys: a
// key is only ever compared with the statement in its own database (seed 002's rule, kept per
// cell). Each cell keeps its own run, lines and findings; the control's run sums them.

// Cell is one cell's reconciler, as Config.Cells returns it.
type Cell struct {
	Name string
	Rec  *Reconciler
}

// ErrNoCell means no cell holds any tenant of the statement's channel account.
var ErrNoCell = errs.New(errs.Unavailable, "no cell holds the channel account's tenants")

// StatementReader gives one import its own reading of a statement: it imports and matches the
// statement with rec (rec.Reconcile or rec.ReconcilePacked, under req) and returns the run.
// ReconcileEach calls it once per cell, so it opens the statement afresh each time.
type StatementReader func(ctx context.Context, rec *Reconciler, req RunRequest, p daemon.Progress) (*Run, error)

// ReconcileEach imports and matches a statement the caller brings (an upload, `idemops
// reconcile import`). In a deployment of cells (Config.Cells) it goes where a recon job's
// fetched statement goes: into every cell holding one of its channel account's tenants (every
// cell for a channel without an account), each matched there in a run linked to this
// reconciler's run, which sums their counts and is returned. Without cells, read runs once, here.
func (r *Reconciler) ReconcileEach(ctx context.Context, req RunRequest, read StatementReader, p daemon.Progress) (*Run, error) {
	if r.cfg.Cells == nil {
		return read(ctx, r, req, p)
	}
	if p == nil {
		p = daemon.NopProgress{}
	}
	runID, err := r.StartRun(ctx, req.Job, req.Import.Channel, req.Import.BillDate, req.Import.Importer)
	if err != nil {
		return nil, err
	}
	account, err := r.channelAccount(ctx, req.Import.Channel)
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	ms := MatchSettings{}
	if req.Job != nil {
		ms = req.Job.MatchSettings()
	}
	if req.Match != nil {
		ms = *req.Match
	}
	return r.reconcileInCells(ctx, runID, req.Job, account, ms, req, read, p)
}

// reconcileInCells imports and matches a statement in each cell of the account's tenants
// (Config.Cells), each reading it through read, and finishes the control's run runID (of job,
// nil for an ad hoc import) with the summed counts. A cell that fails does not stop the others;
// the run then fails naming it, and a re-run (the next schedule, or the operator's) imports into
// every cell again — an imported file is only matched again where it already is.
func (r *Reconciler) reconcileInCells(ctx context.Context, runID int64, job *ReconJob, account *ChannelAccount, ms MatchSettings,
	req RunRequest, read StatementReader, p daemon.Progress) (*Run, error) {
	cells, err := r.cfg.Cells(account.Tenants)
	if err == nil && len(cells) == 0 {
		err = fmt.Errorf("channel account %s (tenants %v): %w", account.Channel, account.Tenants, ErrNoCell)
	}
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	control := &controlRun{id: runID}
	name := "(ad hoc)"
	if job != nil {
		control.jobName, name = &job.Name, job.Name
	}
	var failed []error
	var done []cellRun
	prog := r.newRunProgress(runID, p)
	for _, c := range cells {
		run, err := c.Rec.reconcileMirrored(ctx, account, ms, req, control, read, prog, c.Rec.db != r.db)
		if err != nil {
			failed = append(failed, fmt.Errorf("cell %s: %w", c.Name, err))
			continue
		}
		done = append(done, cellRun{c, run})
	}
	prog.flush(ctx)
	if len(failed) == 0 {
		// Only when every cell has matched is it known which lines no cell has a key for.
		if err := settleAcrossCells(ctx, done); err != nil {
			failed = append(failed, err)
		}
	}
	counts := map[Kind]int64{}
	for _, cr := range done {
		run, err := cr.cell.Rec.GetRun(ctx, cr.run.ID)
		if err != nil {
			failed = append(failed, fmt.Errorf("cell %s: %w", cr.cell.Name, err))
			continue
		}
		for k, n := range run.Counts {
			counts[Kind(k)] += n
		}
		r.cfg.Logger.Info("reconcile: statement matched in cell", "job", name, "cell", cr.cell.Name, "run", run.ID,
			"lines", run.RowsLoaded, "matched", run.RowsMatched, "counts", run.Counts)
	}
	if len(failed) > 0 {
		return r.finishRun(ctx, runID, RunFailed, counts, errors.Join(failed...))
	}
	return r.finishRun(ctx, runID, RunSucceeded, counts, nil)
}

// cellRun is one cell's run of a statement.
type cellRun struct {
	cell Cell
	run  *Run
}

// settleAcrossCells turns the cells' findings into the deployment's. Each cell matched every line
// of the statement against its own keys only, so a line whose key lives in another cell is
// CHANNEL_ONLY "no local key" there; it is the deployment's only when no cell has its key (its
// subject is such a finding in every cell). Findings about no key (a line without one, a line
// twice in the file) are the statement's, kept once: in the first cell. Only open findings are
// removed, and each run's counts are counted again from what it keeps.
func settleAcrossCells(ctx context.Context, runs []cellRun) error {
	if len(runs) < 2 {
		return nil
	}
	var nowhere map[string]bool // subjects no cell has a key for
	for _, cr := range runs {
		var subjects []string
		if err := cr.cell.Rec.db.WithContext(ctx).Raw(`SELECT subject FROM discrepancies
			WHERE run_id = ? AND kind = ? AND key_id IS NULL AND state = 'open'`, cr.run.ID, ChannelOnly).Scan(&subjects).Error; err != nil {
			return fmt.Errorf("cell %s: findings: %w", cr.cell.Name, err)
		}
		here := map[string]bool{}
		for _, s := range subjects {
			if nowhere == nil || nowhere[s] {
				here[s] = true
			}
		}
		nowhere = here
	}
	keep := make([]string, 0, len(nowhere))
	for s := range nowhere {
		keep = append(keep, s)
	}
	for i, cr := range runs {
		db := cr.cell.Rec.db.WithContext(ctx)
		var err error
		if i == 0 {
			err = db.Exec(`DELETE FROM discrepancies WHERE run_id = ? AND kind = ? AND key_id IS NULL AND state = 'open'
				AND NOT subject = ANY(?::text[])`, cr.run.ID, ChannelOnly, textArray(keep)).Error
		} else {
			err = db.Exec(`DELETE FROM discrepancies WHERE run_id = ? AND key_id IS NULL AND state = 'open'`, cr.run.ID).Error
		}
		if err == nil {
			err = db.Exec(`UPDATE recon_runs SET counts = coalesce((SELECT jsonb_object_agg(kind, n)
				FROM (SELECT kind, count(*) AS n FROM discrepancies WHERE run_id = ? GROUP BY kind) c), '{}'::jsonb), updated_at = now()
				WHERE id = ?`, cr.run.ID, cr.run.ID).Error
		}
		if err != nil {
			return fmt.Errorf("cell %s: settle findings across cells: %w", cr.cell.Name, err)
		}
	}
	return nil
}

// reconcileMirrored is one cell's part: the channel account as the control cell has it (its
// tenants and settings, never its credentials) is written into the cell first (mirror), since
// matching reads it there; then the statement is imported and matched in a run of the cell's own.
func (r *Reconciler) reconcileMirrored(ctx context.Context, account *ChannelAccount, ms MatchSettings, req RunRequest,
	control *controlRun, read StatementReader, p daemon.Progress, mirror bool) (*Run, error) {
	if mirror { // the control cell's own database has the account already
		settings, err := json.Marshal(account.Settings)
		if err != nil {
			return nil, err
		}
		row := channelAccountModel{Channel: account.Channel, Tenants: account.Tenants, Kind: account.Kind, Settings: string(settings),
			UpdatedBy: "cells:control"}
		if err := upsertAccount(ctx, r.db, &row, "tenants", "kind", "settings"); err != nil {
			return nil, fmt.Errorf("mirror channel account %s: %w", account.Channel, err)
		}
	}
	// The cell's run has no recon job (jobs are the control cell's): the job's match settings
	// come along instead, and the run names the control's run (and so its job).
	req.Job, req.Match, req.RunID, req.control = nil, &ms, 0, control
	run, err := read(ctx, r, req, p)
	if run == nil && err == nil {
		err = errors.New("no run recorded")
	}
	return run, err
}
