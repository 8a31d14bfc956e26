package daemon

// The executor: it runs a claimed run in its own goroutine, records its end, and stops it after
// its batch (or cancels it) on Stop, a lost leadership or its timeout.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Causes of a run's cancellation, to tell its final status.
var (
	errShutdown   = errors.New("daemon stopping")
	errLeaderLost = errors.New("leadership lost")
	errTimedOut   = errors.New("run timed out")
)

// activeRun is a run under way in this replica.
type activeRun struct {
	soft     chan struct{}
	softOnce sync.Once
	cancel   context.CancelCauseFunc
	done     chan struct{}
	cause    atomic.Pointer[error]
}

// stopAfterBatch asks the run to stop at its next ShouldStop check.
func (a *activeRun) stopAfterBatch(cause error) {
	a.softOnce.Do(func() {
		a.cause.Store(&cause)
		close(a.soft)
	})
}

// launch runs a claimed schedule in its own goroutine.
func (d *Daemon) launch(ctx context.Context, c claimedRun, lead *leadership) {
	a, runCtx := newActiveRun(ctx)
	d.mu.Lock()
	d.active[c.schedule] = a
	d.mu.Unlock()
	d.runs.Add(1)
	go func() {
		defer d.runs.Done()
		defer func() {
			d.mu.Lock()
			delete(d.active, c.schedule)
			d.mu.Unlock()
			d.nudge()
		}()
		// Losing the leadership: finish the batch, and give up after ShutdownTimeout.
		go func() {
			select {
			case <-lead.lost:
				a.stopAfterBatch(errLeaderLost)
				select {
				case <-time.After(d.cfg.ShutdownTimeout):
					a.cancel(errLeaderLost)
				case <-a.done:
				}
			case <-a.done:
			}
		}()
		d.execute(ctx, runCtx, a, c)
	}()
}

// newActiveRun returns a run's handle and its context, cancelled through a.cancel.
func newActiveRun(parent context.Context) (*activeRun, context.Context) {
	ctx, cancel := context.WithCancelCause(parent)
	a := &activeRun{soft: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	return a, context.WithValue(ctx, stopKey{}, a.soft)
}

// execute runs one job run to its end and records it. base bounds the recording: when base has
// ended (an abrupt stop, in effect a crash) the row is left running for the next leader.
func (d *Daemon) execute(base, ctx context.Context, a *activeRun, c claimedRun) *Run {
	defer close(a.done)
	defer a.cancel(nil)
	ctx, cancelT := context.WithTimeoutCause(ctx, c.timeout, errTimedOut)
	defer cancelT()
	jobName := c.job.Name()

	p := &runProgress{db: d.db, ctx: context.WithoutCancel(base), id: c.runID, every: d.cfg.ProgressEvery}
	d.metrics.running.WithLabelValues(jobName).Inc()
	start := time.Now()
	var stats Stats
	var err error
	if c.badSpec != nil {
		err = c.badSpec
	} else {
		stats, err = safeRunOnce(ctx, c.job, c.params, p)
	}
	elapsed := time.Since(start)
	d.metrics.running.WithLabelValues(jobName).Dec()

	status, errText := RunSucceeded, ""
	if err != nil {
		status, errText = classify(ctx, a, err), err.Error()
	}
	d.metrics.runs.WithLabelValues(jobName, string(status)).Inc()
	d.metrics.duration.WithLabelValues(jobName).Observe(elapsed.Seconds())
	if status == RunSucceeded {
		d.metrics.lastSuccess.WithLabelValues(jobName).SetToCurrentTime()
	}
	log := d.log.With("job", jobName, "schedule", c.schedule, "run", c.runID, "took", elapsed.Round(time.Millisecond))
	switch {
	case status != RunSucceeded:
		log.Warn("job run did not succeed", "status", status, "err", errText, "stats", stats)
	case stats.Changed():
		log.Info("job run changed something", "stats", stats)
	}
	// Recorded even when the run was cancelled; only the end of base (a crash, in effect) leaves
	// the row running for the next leader to mark abandoned.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(base), 5*time.Second)
	defer fcancel()
	if base.Err() == nil {
		if ferr := finishRun(fctx, d.db, c.runID, status, stats, errText, p.latest()); ferr != nil {
			log.Warn("run end not recorded", "err", ferr)
		}
	}
	return &Run{ID: c.runID, Schedule: c.schedule, Job: jobName, Status: status, Stats: stats, Error: errText}
}

// safeRunOnce turns a job's panic into a failed run instead of a dead daemon.
func safeRunOnce(ctx context.Context, job Job, params []byte, p Progress) (stats Stats, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job %s panicked: %v", job.Name(), r)
		}
	}()
	return job.RunOnce(ctx, params, p)
}

// classify tells a failed run's status from its error and why its context ended.
func classify(ctx context.Context, a *activeRun, err error) RunStatus {
	if errors.Is(err, ErrStopped) {
		return RunAbandoned
	}
	// A job that failed on its own account failed, even if its deadline passed meanwhile; only an
	// error that is the context's own ending is a timeout or an abandonment.
	if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		if errors.Is(context.Cause(ctx), errTimedOut) {
			return RunTimedOut
		}
		return RunAbandoned
	}
	if a.cause.Load() != nil && errors.Is(err, context.Canceled) {
		return RunAbandoned
	}
	return RunFailed
}

// drainRuns asks every run to stop after its batch and cancels those still going after
// ShutdownTimeout (or when ctx ends), then waits for them to record their end.
func (d *Daemon) drainRuns(ctx context.Context, cause error) {
	d.mu.Lock()
	runs := make([]*activeRun, 0, len(d.active))
	for _, a := range d.active {
		runs = append(runs, a)
	}
	d.mu.Unlock()
	for _, a := range runs {
		a.stopAfterBatch(cause)
	}
	done := make(chan struct{})
	go func() { d.runs.Wait(); close(done) }()
	timer := time.NewTimer(d.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	case <-ctx.Done():
	}
	for _, a := range runs {
		a.cancel(cause)
	}
	<-done
}

// RunJob runs one schedule (or, when no schedule has that name, the registered job of that name
// with empty params) now, in this process and regardless of the leadership, and records it as
// a CLI run. It returns the recorded run. Errors: ErrUnknownJob.
func (d *Daemon) RunJob(ctx context.Context, name string) (*Run, error) {
	c := claimedRun{schedule: name, params: []byte("{}"), timeout: DefaultTimeout}
	jobName := name
	if s, err := GetSchedule(ctx, d.db, name); err == nil {
		jobName, c.params, c.timeout = s.Job, s.Params, s.Timeout
	} else if !errors.Is(err, ErrUnknownSchedule) {
		return nil, err
	} else {
		c.schedule = ""
	}
	d.mu.Lock()
	r, ok := d.jobs[jobName]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("job %q: %w", jobName, ErrUnknownJob)
	}
	c.job = r.job
	id, err := startRun(ctx, d.db, c.schedule, jobName, TriggerCLI, d.id, nil, c.timeout)
	if err != nil {
		return nil, err
	}
	c.runID = id
	// An interrupt cancels the run, but its end is still recorded.
	a, runCtx := newActiveRun(ctx)
	run := d.execute(context.WithoutCancel(ctx), runCtx, a, c)
	if stored, err := GetRun(context.WithoutCancel(ctx), d.db, id); err == nil {
		return stored, nil
	}
	return run, nil
}

// stopKey carries a run's "stop after this batch" channel in its context.
type stopKey struct{}

// ShouldStop reports whether a job should stop before its next batch: its context ended, or the
// daemon asked it to stop (Stop, lost leadership). A job that stops for this reason returns
// ErrStopped (or ctx's error) with the stats of what it did.
func ShouldStop(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	if ch, ok := ctx.Value(stopKey{}).(chan struct{}); ok {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}
