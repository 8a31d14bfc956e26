package daemon

// The scheduler: while this replica leads, it claims due schedules (recording each run's start)
// and hands them to the executor.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"
)

// scheduler claims due schedules while this replica leads and hands them to the executor.
type scheduler struct {
	cfg     Config
	db      *gorm.DB
	id      string
	log     *slog.Logger
	signals *testSignals
	leader  leaderView
	jobs    jobSet
	exec    launcher

	wake       chan struct{} // an election or a run's end: poll now
	stop, done chan struct{}
}

// nudge makes the scheduler poll now rather than at its next tick.
func (s *scheduler) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run starts due schedules while this replica leads.
func (s *scheduler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.PollEvery)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		case <-s.wake:
		}
		lead := s.leader.current()
		if lead == nil {
			continue
		}
		if time.Since(pruned) > time.Hour {
			pruned = time.Now()
			s.pruneRuns(ctx)
		}
		claimed, err := s.claimDue(ctx, lead)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("due schedules not claimed", "err", err)
			}
			continue
		}
		for _, c := range claimed {
			s.exec.launch(ctx, c, lead)
		}
		s.signals.Polled.Signal(len(claimed))
	}
}

// pruneRuns deletes finished runs older than KeepRuns, at most 10 batches of 1000 per call.
func (s *scheduler) pruneRuns(ctx context.Context) {
	var total int64
	for range 10 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res := s.db.WithContext(pctx).Exec(`DELETE FROM job_runs WHERE id IN (
			SELECT id FROM job_runs WHERE status <> 'running' AND started_at < now() - ? * interval '1 second'
			ORDER BY id LIMIT 1000)`, int64(s.cfg.KeepRuns.Seconds()))
		cancel()
		if res.Error != nil {
			s.log.Warn("old job runs not pruned", "err", res.Error)
			return
		}
		total += res.RowsAffected
		if res.RowsAffected < 1000 {
			break
		}
	}
	if total > 0 {
		s.log.Info("pruned old job runs", "runs", total)
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
func (s *scheduler) claimDue(ctx context.Context, lead *leadership) ([]claimedRun, error) {
	jobNames := s.jobs.names()
	busy := append([]string{""}, s.exec.busy()...) // never empty: NOT IN () would match nothing
	if len(jobNames) == 0 {
		return nil, nil
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []claimedRun
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = nil
		var terms []int64
		if err := tx.Raw(leaderCheckSQL, leaderScope, s.id, lead.term).Scan(&terms).Error; err != nil {
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
			c.job, _ = s.jobs.job(r.Job)
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
					nextAt = tm.Next(r.DBNow)
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
				r.Name, r.Job, trigger, s.id, lead.term, r.TimeoutMs).Scan(&ids).Error; err != nil {
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
