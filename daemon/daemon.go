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
	"time"

	"github.com/idemops/idemops/daemon/internal/testsignal"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
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
	// TracerProvider traces each job run as a span (default: OpenTelemetry's global provider,
	// a no-op unless telemetry.Setup installed one).
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
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
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
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
// registered jobs on their schedules. It is three parts with small interfaces between them:
// the elector (elector.go) holds the lease, the scheduler (scheduler.go) claims due schedules
// while it leads, the executor (executor.go) runs and records them.
type Daemon struct {
	cfg Config
	db  *gorm.DB
	id  string
	log *slog.Logger

	mu      sync.Mutex
	jobs    map[string]registered
	started bool

	elector   *elector
	scheduler *scheduler
	executor  *executor
	signals   testSignals
	stopOnce  sync.Once
}

// testSignals are the points a test can wait for (see internal/testsignal); off unless a test
// switches them on before Start.
type testSignals struct {
	Elected     testsignal.Signal[int64]  // this replica became leader (its heartbeat says so), with its term
	SteppedDown testsignal.Signal[string] // it stopped leading, with the reason
	Polled      testsignal.Signal[int]    // the scheduler polled while leading, with the runs it claimed
	RunStarted  testsignal.Signal[int64]  // a run began, with its id
	RunFinished testsignal.Signal[*Run]   // a run ended and its end was recorded
}

func (s *testSignals) init() {
	s.Elected.Init()
	s.SteppedDown.Init()
	s.Polled.Init()
	s.RunStarted.Init()
	s.RunFinished.Init()
}

// leaderView is what the scheduler knows of the elector: the leadership it holds now, nil
// when it follows.
type leaderView interface {
	current() *leadership
}

// launcher is what the scheduler needs of the executor.
type launcher interface {
	// busy lists the schedules running here (the scheduler does not claim them again).
	busy() []string
	// launch runs a claimed run in its own goroutine under lead.
	launch(ctx context.Context, c claimedRun, lead *leadership)
}

// jobSet is what the scheduler needs of the registered jobs.
type jobSet interface {
	names() []string
	job(name string) (Job, bool)
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
	if _, err := register(cfg.Registerer, prometheus.Collector(&storeCollector{db: cfg.DB, timeout: 2 * time.Second})); err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	d := &Daemon{cfg: cfg, db: cfg.DB, id: cfg.Name + "-" + hex.EncodeToString(b[:]), jobs: map[string]registered{}}
	d.log = cfg.Logger.With("replica", d.id)
	d.executor = &executor{cfg: cfg, db: cfg.DB, id: d.id, log: d.log, metrics: m, signals: &d.signals,
		active: map[string]*activeRun{}}
	d.elector = &elector{cfg: cfg, db: cfg.DB, id: d.id, log: d.log, metrics: m, signals: &d.signals,
		stop: make(chan struct{}), done: make(chan struct{})}
	d.scheduler = &scheduler{cfg: cfg, db: cfg.DB, id: d.id, log: d.log, signals: &d.signals,
		leader: d.elector, jobs: (*daemonJobs)(d), exec: d.executor,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// An election or the end of a run is a reason to look for due schedules at once.
	d.elector.elected = d.scheduler.nudge
	d.executor.ended = d.scheduler.nudge
	return d, nil
}

// daemonJobs is the Daemon's registered jobs as the scheduler sees them.
type daemonJobs Daemon

func (j *daemonJobs) names() []string { return (*Daemon)(j).Jobs() }

func (j *daemonJobs) job(name string) (Job, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.jobs[name]
	return r.job, ok
}

// ID is this replica's identity in daemon_replicas, daemon_leader and job_runs.
func (d *Daemon) ID() string { return d.id }

// IsLeader reports whether this replica currently holds the leader lease.
func (d *Daemon) IsLeader() bool { return d.elector.current() != nil }

// Register adds a job with its default schedule (a cron spec, UTC). Start creates the schedule
// row named after the job unless one exists, so an operator's changes survive restarts. An empty
// defaultSpec registers a job that runs only from schedules made elsewhere (one per recon job,
// with its params). An Instrumented job's collectors are registered with the daemon's
// registerer; one that cannot be (a series of that name under other labels is there already —
// a wiring mistake: the job's metrics would reach no scrape) refuses the job. Call it before
// Start. Errors: ErrInvalidSchedule, ErrInvalidConfig (a duplicate or bad name, metrics that
// cannot be registered).
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
				return configErr("job "+job.Name(), "metrics not registered: %v", err)
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
	if err := heartbeat(ctx, d.db, d.elector.replica(false)); err != nil {
		return err
	}
	d.elector.base = ctx
	go d.elector.run(ctx)
	go d.scheduler.run(ctx)
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
		close(d.scheduler.stop)
		<-d.scheduler.done
		d.executor.drain(ctx, errShutdown)
		close(d.elector.stop)
		<-d.elector.done
	})
	return nil
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
	run := d.executor.execute(context.WithoutCancel(ctx), runCtx, a, c)
	if stored, err := GetRun(context.WithoutCancel(ctx), d.db, id); err == nil {
		return stored, nil
	}
	return run, nil
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
