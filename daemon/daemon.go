package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

// Config tunes a Daemon. Zero fields take the defaults in one place, withDefaults.
type Config struct {
	DB *gorm.DB
	// Name names this replica (default: the host name); its ID adds a random suffix, so two
	// processes with one name are still two replicas.
	Name string
	// LeaseTTL is how long the leader lease lasts without renewal (default 15 s); the leader
	// renews every RenewEvery (default 5 s, at most LeaseTTL/2) and steps down when a renewal
	// fails. Followers try to get elected as often.
	LeaseTTL   time.Duration
	RenewEvery time.Duration
	// PollEvery is how often the leader looks for due schedules (default 1 s).
	PollEvery time.Duration
	// ShutdownTimeout bounds how long Stop (or a lost leadership) waits for a run to finish its
	// batch before cancelling it (default 30 s).
	ShutdownTimeout time.Duration
	// ProgressEvery throttles progress writes to job_runs (default 1 s).
	ProgressEvery time.Duration
	// KeepRuns is how long finished job_runs rows are kept (default 14 days); the leader prunes
	// older ones hourly, in bounded batches.
	KeepRuns time.Duration
	// Registerer receives the daemon's and its jobs' metrics (default: a private registry).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
		if c.Name == "" {
			c.Name = "daemon"
		}
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.LeaseTTL / 3
	}
	if c.PollEvery == 0 {
		c.PollEvery = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if c.KeepRuns == 0 {
		c.KeepRuns = 14 * 24 * time.Hour
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.DB == nil:
		return c, configErr("DB", "is required")
	case validateName("name", c.Name) != nil || len(c.Name) > 64:
		return c, configErr("name", "%q must be 1–64 printable ASCII characters without spaces", c.Name)
	case c.LeaseTTL < 200*time.Millisecond || c.LeaseTTL > 10*time.Minute:
		return c, configErr("lease TTL", "%s is outside 200ms..10m", c.LeaseTTL)
	case c.RenewEvery <= 0 || c.RenewEvery*2 > c.LeaseTTL:
		return c, configErr("renew every", "%s must be positive and at most half the lease TTL (%s)", c.RenewEvery, c.LeaseTTL)
	case c.PollEvery < 10*time.Millisecond || c.PollEvery > time.Minute:
		return c, configErr("poll every", "%s is outside 10ms..1m", c.PollEvery)
	case c.ShutdownTimeout < 0 || c.ShutdownTimeout > time.Hour:
		return c, configErr("shutdown timeout", "%s is outside 0..1h", c.ShutdownTimeout)
	case c.ProgressEvery < 0:
		return c, configErr("progress every", "must not be negative")
	case c.KeepRuns < time.Hour:
		return c, configErr("keep runs", "%s is shorter than an hour", c.KeepRuns)
	}
	return c, nil
}

// registered is a job and its default schedule.
type registered struct {
	job         Job
	defaultSpec string
}

// Daemon is one replica: it takes part in the leader election and, while it leads, runs the
// registered jobs on their schedules.
type Daemon struct {
	cfg     Config
	db      *gorm.DB
	id      string
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	jobs    map[string]registered
	active  map[string]*activeRun // by schedule name
	started bool

	lead atomic.Pointer[leadership]
	wake chan struct{} // nudges the scheduler (elected, a run ended)

	electFailures int // owned by electLoop
	electLogged   time.Time

	base                context.Context
	stopSched, stopElec chan struct{}
	schedDone, elecDone chan struct{}
	runs                sync.WaitGroup
	stopOnce            sync.Once
}

// New validates cfg and returns a Daemon; Register jobs, then Start it.
func New(cfg Config) (*Daemon, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	d := &Daemon{cfg: cfg, db: cfg.DB, id: cfg.Name + "-" + hex.EncodeToString(b[:]), metrics: m,
		jobs: map[string]registered{}, active: map[string]*activeRun{}, wake: make(chan struct{}, 1),
		stopSched: make(chan struct{}), stopElec: make(chan struct{}),
		schedDone: make(chan struct{}), elecDone: make(chan struct{})}
	d.log = cfg.Logger.With("replica", d.id)
	return d, nil
}

// ID is this replica's identity in daemon_replicas, daemon_leader and job_runs.
func (d *Daemon) ID() string { return d.id }

// IsLeader reports whether this replica currently holds the leader lease.
func (d *Daemon) IsLeader() bool { return d.lead.Load() != nil }

// Register adds a job with its default schedule (a cron spec, UTC). Start creates the schedule
// row named after the job unless one exists, so an operator's changes survive restarts. An empty
// defaultSpec registers a job that runs only from schedules made elsewhere (one per recon job,
// with its params). Call it before Start. Errors: ErrInvalidSchedule, ErrInvalidConfig (a
// duplicate or bad name).
func (d *Daemon) Register(job Job, defaultSpec string) error {
	if err := validateName("job name", job.Name()); err != nil {
		return err
	}
	if defaultSpec != "" {
		if err := ValidateSchedule(defaultSpec, "UTC"); err != nil {
			return fmt.Errorf("job %s: %w", job.Name(), err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return configErr("job "+job.Name(), "register jobs before Start")
	}
	if _, dup := d.jobs[job.Name()]; dup {
		return configErr("job "+job.Name(), "registered twice")
	}
	if in, ok := job.(Instrumented); ok {
		for _, c := range in.Collectors() {
			if _, err := register(d.cfg.Registerer, c); err != nil {
				d.log.Warn("job metrics not registered", "job", job.Name(), "err", err)
			}
		}
	}
	d.jobs[job.Name()] = registered{job: job, defaultSpec: defaultSpec}
	return nil
}

// Jobs lists the registered job names.
func (d *Daemon) Jobs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.jobs))
	for n := range d.jobs {
		out = append(out, n)
	}
	return out
}

// Start creates missing default schedules, then takes part in the election and, while leading,
// runs due schedules, until Stop. Cancelling ctx is an abrupt stop — loops end, running jobs
// are cancelled, the lease is left to expire — use Stop for the graceful one.
func (d *Daemon) Start(ctx context.Context) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("daemon already started")
	}
	d.started = true
	jobs := make([]registered, 0, len(d.jobs))
	for _, r := range d.jobs {
		jobs = append(jobs, r)
	}
	d.mu.Unlock()

	for _, r := range jobs {
		if r.defaultSpec == "" {
			continue
		}
		if err := ensureSchedule(ctx, d.db, ScheduleSpec{Name: r.job.Name(), Job: r.job.Name(), Spec: r.defaultSpec}); err != nil {
			return err
		}
	}
	if err := heartbeat(ctx, d.db, d.replica(false)); err != nil {
		return err
	}
	d.base = ctx
	go d.electLoop(ctx)
	go d.scheduleLoop(ctx)
	return nil
}

// Stop shuts down gracefully: no new runs start; running ones are asked to stop after their
// current batch and cancelled (recorded abandoned) after ShutdownTimeout or when ctx ends; then
// the replica resigns the leadership, so another takes over at once, and removes its heartbeat.
func (d *Daemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		return nil
	}
	d.stopOnce.Do(func() {
		close(d.stopSched)
		<-d.schedDone
		d.drainRuns(ctx, errShutdown)
		close(d.stopElec)
		<-d.elecDone
	})
	return nil
}

func (d *Daemon) replica(leader bool) Replica {
	host, _ := os.Hostname()
	return Replica{ID: d.id, Name: d.cfg.Name, Host: host, PID: os.Getpid(), IsLeader: leader}
}

// electLoop renews the lease while leading and otherwise tries to get elected.
func (d *Daemon) electLoop(ctx context.Context) {
	defer close(d.elecDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done(): // abrupt: leave the lease to expire
			d.stepDown(d.lead.Load(), "daemon context ended")
			return
		case <-d.stopElec:
			d.resign()
			return
		case <-t.C:
		}
		t.Reset(d.electTick(ctx))
	}
}

// electTick does one renewal or election attempt and says when to do the next.
func (d *Daemon) electTick(ctx context.Context) time.Duration {
	if lead := d.lead.Load(); lead != nil {
		// The renewal must end before the lease could lapse: it gets at most RenewEvery, and
		// RenewEvery is at most half the TTL.
		rctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
		ok, err := renewLease(rctx, d.db, d.id, lead.term, d.cfg.LeaseTTL)
		cancel()
		switch {
		case err != nil:
			d.stepDown(lead, "renewal failed: "+err.Error())
		case !ok:
			d.stepDown(lead, "another replica was elected")
		}
		d.beat(ctx)
		return d.cfg.RenewEvery
	}
	ectx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	term, left, err := tryElect(ectx, d.db, d.id, d.cfg.LeaseTTL)
	cancel()
	if err != nil {
		// One line when the database goes away and one a minute while it stays away, not one
		// per attempt.
		if d.electFailures++; ctx.Err() == nil && (d.electFailures == 1 || time.Since(d.electLogged) > time.Minute) {
			d.electLogged = time.Now()
			d.log.Warn("leader election attempt failed", "err", err, "attempts", d.electFailures)
		}
		return d.cfg.RenewEvery
	}
	d.electFailures = 0
	if term > 0 {
		d.becomeLeader(ctx, term)
		d.beat(ctx)
		return d.cfg.RenewEvery
	}
	d.beat(ctx)
	// Try again as the current lease runs out, so a dead leader is replaced within one TTL.
	return min(max(left+5*time.Millisecond, 10*time.Millisecond), d.cfg.RenewEvery)
}

func (d *Daemon) beat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	defer cancel()
	if err := heartbeat(hctx, d.db, d.replica(d.IsLeader())); err != nil && ctx.Err() == nil {
		d.log.Warn("heartbeat failed", "err", err)
	}
}

func (d *Daemon) becomeLeader(ctx context.Context, term int64) {
	d.lead.Store(&leadership{term: term, lost: make(chan struct{})})
	d.metrics.leader.Set(1)
	d.log.Info("elected leader", "term", term)
	sctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	defer cancel()
	if n, err := sweepAbandoned(sctx, d.db, term); err != nil {
		d.log.Warn("abandoned runs not swept", "err", err)
	} else if n > 0 {
		d.log.Info("marked runs left by earlier leaders abandoned", "runs", n)
	}
	_ = pruneReplicas(sctx, d.db)
	d.nudge()
}

// stepDown ends lead here (if it is still current): running jobs are asked to stop after their
// batch; the scheduler starts nothing more under that term.
func (d *Daemon) stepDown(lead *leadership, reason string) {
	if lead == nil || !d.lead.CompareAndSwap(lead, nil) {
		return
	}
	close(lead.lost)
	d.metrics.leader.Set(0)
	level := slog.LevelWarn
	if reason == reasonStopping {
		level = slog.LevelInfo
	}
	d.log.Log(context.Background(), level, "stepped down as leader", "term", lead.term, "reason", reason)
}

const reasonStopping = "stopping"

// resign expires the lease so a successor need not wait, and removes the heartbeat row.
func (d *Daemon) resign() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.base), 5*time.Second)
	defer cancel()
	if lead := d.lead.Load(); lead != nil {
		if err := resignLease(ctx, d.db, d.id, lead.term); err != nil {
			d.log.Warn("resign failed; the lease will expire", "err", err)
		}
		d.stepDown(lead, reasonStopping)
	}
	if err := d.db.WithContext(ctx).Exec(`DELETE FROM daemon_replicas WHERE id = ?`, d.id).Error; err != nil {
		d.log.Warn("heartbeat row not removed", "err", err)
	}
}

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

// decodeParams decodes a schedule's params into v, rejecting unknown fields with a one-line
// error naming the problem.
func decodeParams(params []byte, v any) error {
	if len(params) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return configErr("params", "%s", oneLine(err.Error()))
	}
	return nil
}
