package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
)

// Operations finds the Operation a key belongs to by its name (downstream.Registry implements
// it).
type Operations interface {
	Get(name string) (claim.Operation, bool)
}

// NoOperations knows no operation: every taken-over key is parked and, after a few tries,
// flagged for an operator. Only for wiring before a registry exists.
type NoOperations struct{}

// Get finds nothing.
func (NoOperations) Get(string) (claim.Operation, bool) { return nil, false }

// ReclaimActor is the actor of every key event the reclaimer causes.
const ReclaimActor = "daemon"

// ReclaimJobName is the reclaimer's job (and default schedule) name.
const ReclaimJobName = "reclaim"

// ErrUnknownOperation is recorded as the lookup error of a key whose Operation the daemon does
// not know (a service deployed ahead of the daemon, or a retired operation).
var ErrUnknownOperation = errs.New(errs.NotFound, "operation not registered with the daemon")

// ReclaimConfig tunes the reclaimer. Zero fields take the defaults in one place, withDefaults.
type ReclaimConfig struct {
	// BatchSize is how many expired leases one takeover statement takes (default 100, at most
	// 10000). Choose it so BatchSize/Workers lookups finish within the claim lease TTL: leases
	// waiting their turn are not renewed.
	BatchSize int
	// MaxPerRun caps the keys one run takes over (default 10000).
	MaxPerRun int
	// Workers drive a batch's keys concurrently (default 4, at most 64).
	Workers int
	Logger  *slog.Logger
}

func (c ReclaimConfig) withDefaults() (ReclaimConfig, error) {
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.MaxPerRun == 0 {
		c.MaxPerRun = 10000
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, c.validate()
}

func (c ReclaimConfig) validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return configErr("reclaim batch size", "%d is outside 1..10000", c.BatchSize)
	case c.MaxPerRun < 1 || c.MaxPerRun > 10_000_000:
		return configErr("reclaim max per run", "%d is outside 1..10000000", c.MaxPerRun)
	case c.Workers < 1 || c.Workers > 64:
		return configErr("reclaim workers", "%d is outside 1..64", c.Workers)
	}
	return nil
}

// reclaimParams are the schedule params a run may override.
type reclaimParams struct {
	BatchSize *int `json:"batch_size"`
	MaxPerRun *int `json:"max_per_run"`
	Workers   *int `json:"workers"`
}

// ReclaimJob takes over processing keys whose lease expired and drives each through
// claim.Store.Drive, executing only for an operation that opts into redrive (claim.Redriver)
// once absence is proven: downstream is asked first, and the key is completed or failed from
// downstream's document, parked for the quarantine after a not-found, or parked with a backoff
// (and eventually flagged) when downstream cannot answer.
type ReclaimJob struct {
	store *claim.Store
	ops   Operations
	cfg   ReclaimConfig
	m     reclaimMetrics
}

type reclaimMetrics struct {
	keys      *prometheus.CounterVec
	attention prometheus.Gauge
	backlog   prometheus.Gauge
}

// NewReclaimJob validates cfg and returns the reclaimer.
func NewReclaimJob(store *claim.Store, ops Operations, cfg ReclaimConfig) (*ReclaimJob, error) {
	if store == nil || ops == nil {
		return nil, configErr("reclaim", "a claim store and an operations registry are required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &ReclaimJob{store: store, ops: ops, cfg: cfg, m: reclaimMetrics{
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idemops", Subsystem: "reclaim", Name: "keys_total",
			Help: "Keys the reclaimer took over, by outcome (recovered, failed_final, failed_retryable, not_found, lookup_error, unknown_operation, redriven, lease_lost, panicked, error).",
		}, []string{"outcome"}),
		attention: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idemops", Subsystem: "reclaim", Name: "keys_needing_attention",
			Help: "Keys flagged for an operator after repeated failed downstream lookups (as of the last run).",
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idemops", Subsystem: "reclaim", Name: "expired_leases",
			Help: "Processing keys whose lease has expired, as of the end of the last run (counted up to 10000).",
		}),
	}}, nil
}

// Name is "reclaim".
func (j *ReclaimJob) Name() string { return ReclaimJobName }

// Collectors are the reclaimer's metrics.
func (j *ReclaimJob) Collectors() []prometheus.Collector {
	return []prometheus.Collector{j.m.keys, j.m.attention, j.m.backlog}
}

// reclaim outcomes, the keys of its Stats.
const (
	outTakenOver        = "taken_over"
	outRecovered        = "recovered"
	outFailedFinal      = "failed_final"
	outFailedRetryable  = "failed_retryable"
	outNotFound         = "not_found"
	outLookupError      = "lookup_error"
	outUnknownOperation = "unknown_operation"
	outRedriven         = "redriven"
	outLeaseLost        = "lease_lost"
	outPanicked         = "panicked"
	outError            = "error"
)

// RunOnce takes over expired leases batch by batch until none is left, MaxPerRun is reached,
// or the daemon asks it to stop (then it finishes the batch in hand and returns ErrStopped).
func (j *ReclaimJob) RunOnce(ctx context.Context, params []byte, p Progress) (Stats, error) {
	cfg := j.cfg
	var over reclaimParams
	if err := decodeParams(params, &over); err != nil {
		return nil, err
	}
	if over.BatchSize != nil {
		cfg.BatchSize = *over.BatchSize
	}
	if over.MaxPerRun != nil {
		cfg.MaxPerRun = *over.MaxPerRun
	}
	if over.Workers != nil {
		cfg.Workers = *over.Workers
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}

	stats := Stats{}
	var mu sync.Mutex
	count := func(outcome string) {
		mu.Lock()
		stats[outcome]++
		mu.Unlock()
		j.m.keys.WithLabelValues(outcome).Inc()
	}
	var recovered panics
	var runErr error
	taken := 0
	for taken < cfg.MaxPerRun {
		if ShouldStop(ctx) {
			runErr = stopErr(ctx)
			break
		}
		leases, err := j.store.TakeoverExpired(ctx, min(cfg.BatchSize, cfg.MaxPerRun-taken), ReclaimActor)
		if err != nil {
			runErr = err
			break
		}
		if len(leases) == 0 {
			break
		}
		taken += len(leases)
		stats[outTakenOver] += int64(len(leases))
		p.Report("reclaim", int64(taken)-int64(len(leases)), 0)
		j.driveBatch(ctx, cfg.Workers, leases, count, &recovered, func(done int) {
			p.Report("reclaim", int64(taken-len(leases)+done), 0)
		})
		p.Report("reclaim", int64(taken), 0)
	}
	j.refreshGauges(ctx)
	if runErr == nil {
		runErr = recovered.err("keys' operations", "those keys are held (or parked after a lookup) for an operator")
	}
	return stats, runErr
}

// stopErr is why a job stopped between batches.
func stopErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrStopped
}

// driveBatch drives every lease of a batch with a small worker pool. The batch is finished even
// when the daemon asks to stop; only a cancelled ctx cuts it short, and then the leases left
// undriven simply expire again and are taken over later.
func (j *ReclaimJob) driveBatch(ctx context.Context, workers int, leases []*claim.Lease, count func(string), recovered *panics, progress func(int)) {
	work := make(chan *claim.Lease)
	var wg sync.WaitGroup
	var doneMu sync.Mutex
	done := 0
	for range min(workers, len(leases)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				count(j.reclaimOneSafely(ctx, l, recovered))
				doneMu.Lock()
				done++
				n := done
				doneMu.Unlock()
				progress(n)
			}
		}()
	}
	for _, l := range leases {
		if ctx.Err() != nil {
			break
		}
		work <- l
	}
	close(work)
	wg.Wait()
}

// reclaimOneSafely is reclaimOne with any panic recovered where it happens: an Operation's is
// recovered by Drive (the key held or parked), anything else here; either way the worker goes on
// with the batch and the run fails naming the panic's type.
func (j *ReclaimJob) reclaimOneSafely(ctx context.Context, l *claim.Lease, recovered *panics) (outcome string) {
	defer func() {
		if p := claim.RecoveredPanic("reclaim", recover()); p != nil {
			j.cfg.Logger.Error("reclaim worker panicked; the key's lease lapses and it is taken over again",
				"job", ReclaimJobName, "key", l.Digest, "panic_type", p.Type)
			recovered.add(p)
			outcome = outPanicked
		}
	}()
	outcome, p := j.reclaimOne(ctx, l)
	recovered.add(p)
	return outcome
}

// reclaimOne drives one taken-over key and says how it ended (and, when its Operation panicked,
// the recovered panic).
func (j *ReclaimJob) reclaimOne(ctx context.Context, l *claim.Lease) (string, *claim.PanicError) {
	log := j.cfg.Logger.With("job", ReclaimJobName, "key", l.Digest)
	op, ok := j.ops.Get(l.Operation)
	if !ok {
		// Park it with the lookup backoff: a daemon that does not know the operation yet (a
		// service deployed first) retries later, and after a few tries an operator is asked.
		wait, err := j.store.RecordLookupError(ctx, l, fmt.Errorf("%w: %s", ErrUnknownOperation, l.Operation))
		if err != nil {
			log.Warn("unknown operation not recorded", "operation", l.Operation, "err", err)
			return outError, nil
		}
		log.Warn("key of an unknown operation parked", "operation", l.Operation, "retry_in", wait)
		return outUnknownOperation, nil
	}
	obs := &observedOp{Operation: op}
	// Drive executes only with Execute: the reclaimer lets it for operations that opt into
	// redrive, once downstream proved the key absent.
	out, err := j.store.Drive(ctx, obs, l, claim.DriveOptions{Execute: obs.Redrive()})
	p := (*claim.PanicError)(nil)
	switch {
	case errors.Is(err, claim.ErrLeaseLost):
		return outLeaseLost, nil
	case errors.As(err, &p):
		return outPanicked, p
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("reclaim failed", "err", err)
		}
		return outError, nil
	}
	switch out.Kind {
	case claim.Recovered:
		log.Info("key completed from downstream's document", "resource_id", out.ResourceID)
		return outRecovered, nil
	case claim.Completed:
		log.Info("key re-driven after downstream twice said not found", "resource_id", out.ResourceID)
		return outRedriven, nil
	case claim.Failed:
		if obs.executed {
			return outRedriven, nil
		}
		if out.State == claim.StateFailedFinal {
			return outFailedFinal, nil
		}
		return outFailedRetryable, nil
	case claim.InProgress:
		if obs.lookupErr {
			return outLookupError, nil
		}
		return outNotFound, nil
	}
	return outError, nil
}

// observedOp records what Drive did with the Operation, so the reclaimer can count outcomes
// that Drive's Outcome does not tell apart (a lookup error and a not-found both park the key).
type observedOp struct {
	claim.Operation
	lookupErr bool
	executed  bool
}

func (o *observedOp) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	doc, err := o.Operation.Lookup(ctx, l)
	o.lookupErr = err != nil
	return doc, err
}

func (o *observedOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	o.executed = true
	return o.Operation.Execute(ctx, l)
}

// Redrive forwards the wrapped Operation's choice (false when it has none).
func (o *observedOp) Redrive() bool {
	r, ok := o.Operation.(claim.Redriver)
	return ok && r.Redrive()
}

// Apply is forwarded as is (spelled out so the wrapper's method set is plain to read).
func (o *observedOp) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return o.Operation.Apply(ctx, tx, l, doc)
}

// refreshGauges counts keys needing attention and the expired backlog (capped at
// backlogCountCap, so a large backlog costs a bounded read) for the metrics.
func (j *ReclaimJob) refreshGauges(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	db := j.store.DB()
	if n, err := keys.CountNeedsAttention(ctx, db, keys.AllTenants()); err == nil {
		j.m.attention.Set(float64(n))
	}
	if n, err := keys.CountExpiredLeases(ctx, db, keys.AllTenants(), backlogCountCap); err == nil {
		j.m.backlog.Set(float64(n))
	}
}

// backlogCountCap bounds the backlog gauge's count.
const backlogCountCap = 10000
