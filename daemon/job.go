package daemon

import (
	"context"
	"time"
)

// Job is one kind of scheduled work. Every job has the same shape (after River's maintenance
// services): a Config with defaults filled in one place and validated at construction, and a
// RunOnce that does one bounded pass and returns what it changed. Jobs live in the package that
// owns their tables (reclaim and the outbox relay here, reconciliation in reconcile, purge in
// retention); cmd wires them into the daemon.
type Job interface {
	// Name is the job's stable identifier (schedules and job_runs refer to it).
	Name() string
	// RunOnce does one bounded pass. params are the schedule's parameters (JSON object, may be
	// empty). It reports progress through p and returns stats (counts of what it changed). It
	// must return promptly once ctx is done, leaving no half-done batch.
	RunOnce(ctx context.Context, params []byte, p Progress) (Stats, error)
}

// Stats are the counts a run changed, e.g. {"taken_over": 12, "completed": 10}.
type Stats map[string]int64

// Changed reports whether any count is non-zero (jobs log only when they changed something).
func (s Stats) Changed() bool {
	for _, v := range s {
		if v != 0 {
			return true
		}
	}
	return false
}

// Progress receives a run's progress; implementations persist it to job_runs for the console.
type Progress interface {
	// Report sets how much is done of total (total 0: unknown) with a short phase label.
	Report(phase string, done, total int64)
}

// NopProgress discards progress (tests, CLI runs without a job_runs row).
type NopProgress struct{}

// Report does nothing.
func (NopProgress) Report(string, int64, int64) {}

// DefaultTimeout bounds a run when its schedule sets none.
const DefaultTimeout = 10 * time.Minute
