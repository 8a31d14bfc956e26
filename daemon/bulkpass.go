package daemon

import (
	"context"
	"fmt"
)

// BulkPass is one pass of a job that works through runs an operator started and the daemon
// finishes (bulk replays, bulk runs of findings). Up to perPass times it stops with ErrStopped
// when the daemon asks (the run stays running and the next pass resumes it), takes for this job
// run the next run no running job run holds (take; nil: none is left), counts it in stats
// "runs" and works it (work). It runs under the daemon only: take records the job run on the
// run it takes, which is how a run whose job run ended without finishing it (a crash, a stop, a
// lost leadership) is known to be free again.
func BulkPass[R any](ctx context.Context, job string, perPass int,
	take func(ctx context.Context, jobRun int64) (*R, error),
	work func(ctx context.Context, run *R, stats Stats) error) (Stats, error) {
	jobRun, ok := RunID(ctx)
	if !ok {
		return nil, fmt.Errorf("%s runs under the daemon only (it records its job run on each bulk run)", job)
	}
	stats := Stats{}
	for range perPass {
		if ShouldStop(ctx) {
			return stats, ErrStopped
		}
		run, err := take(ctx, jobRun)
		if err != nil || run == nil {
			return stats, err
		}
		stats["runs"]++
		if err := work(ctx, run, stats); err != nil {
			return stats, err
		}
	}
	return stats, nil
}
