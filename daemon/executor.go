package daemon

// The executor: it runs a claimed run in its own goroutine, records its end, and stops it after
// its batch (or cancels it) on Stop, a lost leadership or its timeout.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
)

// Causes of a run's cancellation, to tell its final status.
var (
	errShutdown   = errors.New("daemon stopping")
	errLeaderLost = errors.New("leadership lost")
	errTimedOut   = errors.New("run timed out")
)

// executor runs claimed runs, each in its own goroutine, and records their ends.
type executor struct {
	cfg     Config
	db      *gorm.DB
	id      string
	log     *slog.Logger
	metrics *metrics
	signals *testSignals
	ended   func() // called after a launched run ended (the scheduler's nudge)

	mu     sync.Mutex
	active map[string]*activeRun // by schedule name
	runs   sync.WaitGroup
}

// busy lists the schedules running here.
func (x *executor) busy() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]string, 0, len(x.active))
	for n := range x.active {
		out = append(out, n)
	}
	return out
}

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
func (x *executor) launch(ctx context.Context, c claimedRun, lead *leadership) {
	a, runCtx := newActiveRun(ctx)
	x.mu.Lock()
	x.active[c.schedule] = a
	x.mu.Unlock()
	x.runs.Add(1)
	go func() {
		defer x.runs.Done()
		defer func() {
			x.mu.Lock()
			delete(x.active, c.schedule)
			x.mu.Unlock()
			x.ended()
		}()
		// Losing the leadership: finish the batch, and give up after ShutdownTimeout.
		go func() {
			select {
			case <-lead.lost:
				a.stopAfterBatch(errLeaderLost)
				select {
				case <-time.After(x.cfg.ShutdownTimeout):
					a.cancel(errLeaderLost)
				case <-a.done:
				}
			case <-a.done:
			}
		}()
		x.execute(ctx, runCtx, a, c)
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
func (x *executor) execute(base, ctx context.Context, a *activeRun, c claimedRun) *Run {
	defer close(a.done)
	defer a.cancel(nil)
	ctx, cancelT := context.WithTimeoutCause(ctx, c.timeout, errTimedOut)
	defer cancelT()
	ctx = context.WithValue(ctx, runIDKey{}, c.runID)
	jobName := c.job.Name()
	ctx, span := x.cfg.TracerProvider.Tracer("github.com/idemops/idemops/daemon").Start(ctx, "job "+jobName,
		trace.WithAttributes(attribute.String("idemops.job", jobName), attribute.String("idemops.schedule", c.schedule),
			attribute.Int64("idemops.job_run", c.runID), attribute.String("idemops.replica", x.id)))
	defer span.End()

	p := &runProgress{db: x.db, ctx: context.WithoutCancel(base), id: c.runID, every: x.cfg.ProgressEvery}
	x.metrics.running.WithLabelValues(jobName).Inc()
	x.signals.RunStarted.Signal(c.runID)
	start := time.Now()
	var stats Stats
	var err error
	if c.badSpec != nil {
		err = c.badSpec
	} else {
		stats, err = safeRunOnce(ctx, c.job, c.params, p)
	}
	elapsed := time.Since(start)
	x.metrics.running.WithLabelValues(jobName).Dec()

	status, errText := RunSucceeded, ""
	if err != nil {
		status, errText = classify(ctx, a, err), err.Error()
		span.SetStatus(codes.Error, errText)
	}
	span.SetAttributes(attribute.String("idemops.job_status", string(status)))
	x.metrics.runs.WithLabelValues(jobName, string(status)).Inc()
	x.metrics.duration.WithLabelValues(jobName).Observe(elapsed.Seconds())
	if status == RunSucceeded {
		x.metrics.lastSuccess.WithLabelValues(jobName).SetToCurrentTime()
	}
	log := x.log.With("job", jobName, "schedule", c.schedule, "run", c.runID, "took", elapsed.Round(time.Millisecond))
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
		if ferr := finishRun(fctx, x.db, c.runID, status, stats, err, p.latest()); ferr != nil {
			log.Warn("run end not recorded", "err", ferr)
		}
	}
	run := &Run{ID: c.runID, Schedule: c.schedule, Job: jobName, Status: status, Stats: stats, Error: errText}
	if base.Err() == nil {
		x.signals.RunFinished.Signal(run)
	}
	return run
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

// drain asks every run to stop after its batch and cancels those still going after
// ShutdownTimeout (or when ctx ends), then waits for them to record their end.
func (x *executor) drain(ctx context.Context, cause error) {
	x.mu.Lock()
	runs := make([]*activeRun, 0, len(x.active))
	for _, a := range x.active {
		runs = append(runs, a)
	}
	x.mu.Unlock()
	for _, a := range runs {
		a.stopAfterBatch(cause)
	}
	done := make(chan struct{})
	go func() { x.runs.Wait(); close(done) }()
	timer := time.NewTimer(x.cfg.ShutdownTimeout)
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

// runIDKey carries a run's job_runs id in its context.
type runIDKey struct{}

// RunID is the job_runs id of the run ctx belongs to (false outside a run). A job that works
// through rows of its own records it on them, so that a later run knows whether the run that
// took a row is still going or was left abandoned.
func RunID(ctx context.Context) (int64, bool) {
	id, ok := ctx.Value(runIDKey{}).(int64)
	return id, ok
}
