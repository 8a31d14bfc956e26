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
