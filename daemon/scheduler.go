package daemon

// The scheduler: while this replica leads, it claims due schedules (recording each run's start)
// and hands them to the executor.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

func (d *Daemon) nudge() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// scheduleLoop starts due schedules while this replica leads.
func (d *Daemon) scheduleLoop(ctx context.Context) {
	defer close(d.schedDone)
	t := time.NewTicker(d.cfg.PollEvery)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopSched:
			return
		case <-t.C:
		case <-d.wake:
		}
		lead := d.lead.Load()
		if lead == nil {
			continue
		}
		if time.Since(pruned) > time.Hour {
			pruned = time.Now()
			d.pruneRuns(ctx)
		}
		claimed, err := d.claimDue(ctx, lead)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("due schedules not claimed", "err", err)
			}
			continue
		}
		for _, c := range claimed {
			d.launch(ctx, c, lead)
		}
	}
}

// pruneRuns deletes finished runs older than KeepRuns, at most 10 batches of 1000 per call.
func (d *Daemon) pruneRuns(ctx context.Context) {
	var total int64
	for range 10 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res := d.db.WithContext(pctx).Exec(`DELETE FROM job_runs WHERE id IN (
			SELECT id FROM job_runs WHERE status <> 'running' AND started_at < now() - ? * interval '1 second'
			ORDER BY id LIMIT 1000)`, int64(d.cfg.KeepRuns.Seconds()))
		cancel()
		if res.Error != nil {
			d.log.Warn("old job runs not pruned", "err", res.Error)
			return
		}
		total += res.RowsAffected
		if res.RowsAffected < 1000 {
			break
		}
	}
	if total > 0 {
		d.log.Info("pruned old job runs", "runs", total)
	}
}

// claimedRun is a schedule whose run start was recorded.
type claimedRun struct {
	runID    int64
	schedule string
	job      Job
	params   []byte
	timeout  time.Duration
	badSpec  error
}

type dueRow struct {
	Name      string
	Job       string
	Params    string
	Spec      string
	TimeZone  string
	TimeoutMs int64
	Due       bool
	Requested bool
	DBNow     time.Time
}

// dueSQL picks due schedules of registered jobs that are not running here, earliest first.
// SKIP LOCKED: a deposed leader still finishing its poll never blocks the new one.
// schedules_due_idx serves the regular case; requested runs are few.
const dueSQL = `
SELECT name, job, params::text AS params, spec, time_zone, timeout_ms,
       (NOT paused AND next_run_at <= now()) AS due, run_requested_at IS NOT NULL AS requested, now() AS db_now
FROM schedules
WHERE job IN ? AND name NOT IN ?
  AND ((NOT paused AND next_run_at <= now()) OR run_requested_at IS NOT NULL)
ORDER BY next_run_at
LIMIT 20
FOR UPDATE SKIP LOCKED`

// claimDue records the start of every due schedule and advances its next run, in one
// transaction that also checks this replica still holds term.
func (d *Daemon) claimDue(ctx context.Context, lead *leadership) ([]claimedRun, error) {
	d.mu.Lock()
	jobNames := make([]string, 0, len(d.jobs))
	for n := range d.jobs {
		jobNames = append(jobNames, n)
	}
	busy := []string{""} // never empty: NOT IN () would match nothing
	for n := range d.active {
		busy = append(busy, n)
	}
	d.mu.Unlock()
	if len(jobNames) == 0 {
		return nil, nil
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []claimedRun
	err := d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = nil
		var terms []int64
		if err := tx.Raw(leaderCheckSQL, leaderScope, d.id, lead.term).Scan(&terms).Error; err != nil {
			return err
		}
		if len(terms) == 0 {
			return nil // the term ended; electLoop will notice
		}
		var rows []dueRow
		if err := tx.Raw(dueSQL, jobNames, busy).Scan(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			c := claimedRun{schedule: r.Name, params: []byte(r.Params), timeout: time.Duration(r.TimeoutMs) * time.Millisecond}
			d.mu.Lock()
			c.job = d.jobs[r.Job].job
			d.mu.Unlock()
			trigger := TriggerSchedule
			if r.Requested && !r.Due {
				trigger = TriggerRunNow
			}
			next := "next_run_at"
			var args []any
			if r.Due {
				// From now, not from the missed slot: a long outage yields one run, not a pile.
				tm, err := parseTiming(r.Spec, r.TimeZone)
				nextAt := r.DBNow.Add(time.Hour) // a spec edited by hand into nonsense retries hourly
				if err != nil {
					c.badSpec = err
				} else {
					nextAt = tm.next(r.DBNow)
				}
				next, args = "?", []any{nextAt}
			}
			if err := tx.Exec(`UPDATE schedules SET next_run_at = `+next+`, run_requested_at = NULL WHERE name = ?`,
				append(args, r.Name)...).Error; err != nil {
				return err
			}
			var ids []int64
			if err := tx.Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, term, deadline_at)
				VALUES (?, ?, ?, ?, ?, now() + ? * interval '1 millisecond') RETURNING id`,
				r.Name, r.Job, trigger, d.id, lead.term, r.TimeoutMs).Scan(&ids).Error; err != nil {
				return err
			}
			c.runID = ids[0]
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due schedules: %w", err)
	}
	return out, nil
}
