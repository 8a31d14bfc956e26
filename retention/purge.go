package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
)

// Config tunes purges. Zero fields take the defaults in one place, withDefaults; NewPurgeJob
// validates the result.
type Config struct {
	// BatchSize is how many keys one batch changes at most (default 10,000).
	BatchSize int
	// MinBatchSize is as small as repeated timeouts shrink a batch (default 100).
	MinBatchSize int
	// MaxRows bounds the rows each phase changes (the stamp phase: reads) in one run
	// (default 2,000,000); what is left waits for the next run.
	MaxRows int64
	// StatementTimeout bounds every batch statement (default 10 s); CountTimeout bounds the dry
	// run's count (default 2 min).
	StatementTimeout time.Duration
	CountTimeout     time.Duration
	// ExactUpTo: a dry run counts every ended key while the keys table holds at most this many
	// rows (default 100,000; negative: always exact); above it, it estimates from a sample of
	// about SampleRows of them (default 30,000), so that a preview of 10M keys costs what one of
	// 30k does (keys.CountDue).
	ExactUpTo  int64
	SampleRows int64
	// ShrinkAfter timeouts in a row halve the batch (default 2); after MaxTimeouts timeouts in
	// one run the run gives up with ErrTooManyTimeouts (default 20).
	ShrinkAfter int
	MaxTimeouts int
	// PauseMin..PauseMax is the random pause between batches, so that a purge never holds the
	// database in one long burst (defaults 1 ms..5 ms; a negative PauseMax: no pause).
	PauseMin time.Duration
	PauseMax time.Duration
	// StampSlack is how far back the stamp phase looks again once caught up, for keys whose
	// transaction committed after a later one (default 5 min).
	StampSlack time.Duration
	// Actor is recorded on runs and tombstone events when Options.Actor is empty (default
	// "daemon").
	Actor  string
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.BatchSize == 0 {
		c.BatchSize = 10_000
	}
	if c.MinBatchSize == 0 {
		c.MinBatchSize = 100
	}
	if c.MaxRows == 0 {
		c.MaxRows = 2_000_000
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = 10 * time.Second
	}
	if c.CountTimeout == 0 {
		c.CountTimeout = 2 * time.Minute
	}
	if c.ExactUpTo == 0 {
		c.ExactUpTo = 100_000
	}
	if c.SampleRows == 0 {
		c.SampleRows = 30_000
	}
	if c.ShrinkAfter == 0 {
		c.ShrinkAfter = 2
	}
	if c.MaxTimeouts == 0 {
		c.MaxTimeouts = 20
	}
	if c.PauseMin == 0 && c.PauseMax == 0 {
		c.PauseMin, c.PauseMax = time.Millisecond, 5*time.Millisecond
	}
	if c.PauseMax < 0 {
		c.PauseMin, c.PauseMax = 0, 0
	}
	if c.StampSlack == 0 {
		c.StampSlack = 5 * time.Minute
	}
	if c.Actor == "" {
		c.Actor = "daemon"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.MinBatchSize < 1:
		return c, errors.New("retention: MinBatchSize must be at least 1")
	case c.BatchSize < c.MinBatchSize || c.BatchSize > MaxBatchSize:
		return c, fmt.Errorf("retention: BatchSize %d must be within %d..%d", c.BatchSize, c.MinBatchSize, MaxBatchSize)
	case c.MaxRows < 1:
		return c, errors.New("retention: MaxRows must be positive")
	case c.StatementTimeout < time.Millisecond || c.CountTimeout < time.Millisecond:
		return c, errors.New("retention: StatementTimeout and CountTimeout must be at least 1ms")
	case c.ShrinkAfter < 1 || c.MaxTimeouts < 1:
		return c, errors.New("retention: ShrinkAfter and MaxTimeouts must be positive")
	case c.PauseMin < 0 || c.PauseMin > c.PauseMax:
		return c, errors.New("retention: need 0 <= PauseMin <= PauseMax")
	case c.SampleRows < 1:
		return c, errors.New("retention: SampleRows must be positive")
	case c.StampSlack < 0:
		return c, errors.New("retention: StampSlack must not be negative")
	}
	return c, nil
}

// MaxBatchSize is the largest batch a run accepts.
const MaxBatchSize = 100_000

// PurgeJob purges keys by policy: the daemon runs it on a schedule (daemon.Job), the CLI and the
// console run it on demand through Purge.
type PurgeJob struct {
	db  *gorm.DB
	cfg Config
}

var _ daemon.Job = (*PurgeJob)(nil)

// NewPurgeJob validates cfg and returns the job on db.
func NewPurgeJob(db *gorm.DB, cfg Config) (*PurgeJob, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &PurgeJob{db: db, cfg: cfg}, nil
}

// Config returns the effective configuration.
func (j *PurgeJob) Config() Config { return j.cfg }

// Name is the job's identifier in schedules and job_runs.
func (j *PurgeJob) Name() string { return "purge" }

// Options are one run's choices.
type Options struct {
	// DryRun counts what would go, per operation, state and day, and changes nothing.
	DryRun bool
	// Operation limits deletion and tombstoning to one operation ("": all). The stamp phase
	// always covers every operation: stamps are not deletions and share one cursor.
	Operation string
	// BatchSize overrides Config.BatchSize for this run (0: the configured one).
	BatchSize int
	// Actor runs the purge: operator:NAME from the CLI or console, "daemon" from a schedule.
	Actor string
}

// Params are a schedule's parameters for the purge job, as JSON.
type Params struct {
	DryRun    bool   `json:"dry_run"`
	Operation string `json:"operation"`
	Batch     int    `json:"batch"`
}

// ParseParams reads a schedule's parameters (an empty document: defaults). Unknown fields are
// refused, so that a typo does not silently purge everything.
func ParseParams(params []byte) (Options, error) {
	params = bytes.TrimSpace(params)
	if len(params) == 0 || string(params) == "null" {
		return Options{}, nil
	}
	if len(params) > 4096 {
		return Options{}, inputErr(ErrInvalidOptions, "params", "is %d bytes, at most 4096 allowed", len(params))
	}
	var p Params
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Options{}, inputErr(ErrInvalidOptions, "params", "%v", err)
	}
	return Options{DryRun: p.DryRun, Operation: p.Operation, BatchSize: p.Batch}, nil
}

func (j *PurgeJob) options(o Options) (Options, error) {
	if o.Operation != "" {
		if err := ValidOperation("operation", o.Operation); err != nil {
			return o, errs.Field("operation", err.(*errs.FieldError).Why).Of(ErrInvalidOptions)
		}
	}
	switch {
	case o.BatchSize == 0:
		o.BatchSize = j.cfg.BatchSize
	case o.BatchSize < j.cfg.MinBatchSize || o.BatchSize > MaxBatchSize:
		return o, inputErr(ErrInvalidOptions, "batch", "must be within %d..%d, got %d", j.cfg.MinBatchSize, MaxBatchSize, o.BatchSize)
	}
	if o.Actor == "" {
		o.Actor = j.cfg.Actor
	}
	if len(o.Actor) > 200 {
		return o, inputErr(ErrInvalidOptions, "actor", "is longer than 200 characters")
	}
	return o, nil
}

// Counts are keys per operation, then per state.
type Counts map[string]map[claim.State]int64

func (c Counts) add(op string, state claim.State, n int64) {
	if c[op] == nil {
		c[op] = map[claim.State]int64{}
	}
	c[op][state] += n
}

// Report is what a run did (or, for a dry run, would do).
type Report struct {
	RunID      int64
	DryRun     bool
	Operation  string
	Actor      string
	StartedAt  time.Time
	FinishedAt time.Time
	// Restamped keys had their expiry columns brought in line with the policies.
	Restamped int64
	// Deleted and Tombstoned are the totals of DeletedBy and TombstonedBy.
	Deleted      int64
	Tombstoned   int64
	DeletedBy    Counts
	TombstonedBy Counts
	// Due is the dry run's breakdown per phase, operation, state and creation day; Sample says
	// whether its counts (and Deleted, Tombstoned) are exact or estimated from a sample.
	Due    []keys.DueCount
	Sample keys.DueSample
	// BatchSize is the batch size the run ended with (smaller than it started after timeouts).
	BatchSize int
	Timeouts  int
	// Complete: every phase ran to its end (false: stopped at MaxRows, more is due).
	Complete bool
}

// Stats are the report's counts for the daemon's job_runs.
func (r *Report) Stats() daemon.Stats {
	if r.DryRun {
		return daemon.Stats{"would_delete": r.Deleted, "would_tombstone": r.Tombstoned}
	}
	return daemon.Stats{"deleted": r.Deleted, "tombstoned": r.Tombstoned, "restamped": r.Restamped,
		"timeouts": int64(r.Timeouts), "batch_size": int64(r.BatchSize)}
}

// RunOnce runs one purge with the schedule's params (see Params).
func (j *PurgeJob) RunOnce(ctx context.Context, params []byte, p daemon.Progress) (daemon.Stats, error) {
	opts, err := ParseParams(params)
	if err != nil {
		return nil, err
	}
	rep, err := j.Purge(ctx, opts, p)
	if rep == nil {
		return nil, err
	}
	return rep.Stats(), err
}

// DryRun counts what a purge would do now, per operation, state and day, changing nothing
// (a purge_log row records that it was asked).
func (j *PurgeJob) DryRun(ctx context.Context, operation, actor string) (*Report, error) {
	return j.Purge(ctx, Options{DryRun: true, Operation: operation, Actor: actor}, nil)
}

// Purge runs one purge: stamp (bring expiry columns in line with the policies), delete (keys
// whose period is over, with their events), tombstone (responses whose period is over). Each
// phase works in batches, each batch its own transaction with a statement timeout; one
// purge_log row records the run. It returns an *errs.FieldError for bad options (nothing runs), and
// the report so far with the error that stopped it otherwise.
func (j *PurgeJob) Purge(ctx context.Context, opts Options, p daemon.Progress) (*Report, error) {
	opts, err := j.options(opts)
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = daemon.NopProgress{}
	}
	set, gen, err := j.loadPolicies(j.db.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	rep := &Report{DryRun: opts.DryRun, Operation: opts.Operation, Actor: opts.Actor, BatchSize: opts.BatchSize,
		DeletedBy: Counts{}, TombstonedBy: Counts{}}
	if err := j.startLog(ctx, rep); err != nil {
		return nil, err
	}
	st := &runState{rules: rulesFor(set, opts.Operation), gen: gen, operation: opts.Operation}
	if opts.DryRun {
		err = j.countDue(ctx, rep, st.rules)
	} else {
		err = j.purge(ctx, rep, st, p)
	}
	j.finishLog(ctx, rep, err)
	if rep.Deleted+rep.Tombstoned+rep.Restamped > 0 || err != nil {
		j.cfg.Logger.Info("purge", "run", rep.RunID, "dry_run", rep.DryRun, "operation", rep.Operation,
			"deleted", rep.Deleted, "tombstoned", rep.Tombstoned, "restamped", rep.Restamped,
			"timeouts", rep.Timeouts, "batch_size", rep.BatchSize, "complete", rep.Complete, "err", err)
	}
	return rep, err
}

func rulesFor(set *PolicySet, operation string) keys.ExpiryRules {
	return keys.ExpiryRules{Policies: set.expiryPolicies(), Floor: set.Floor.Total(), Operation: operation}
}

// runState is what a run's batches share: the rules and the policy generation they came from.
type runState struct {
	rules     keys.ExpiryRules
	gen       int64
	operation string
}

type settingsRow struct {
	StampGeneration int64
	StampCursorAt   time.Time
	StampCursorID   int64
}

func (j *PurgeJob) loadPolicies(db *gorm.DB) (*PolicySet, int64, error) {
	set, err := ListPolicies(db.Statement.Context, db)
	if err != nil {
		return nil, 0, err
	}
	var s []settingsRow
	if err := db.Raw(`SELECT stamp_generation FROM retention_settings`).Scan(&s).Error; err != nil || len(s) != 1 {
		return nil, 0, fmt.Errorf("read retention settings: %v", err)
	}
	return set, s[0].StampGeneration, nil
}

// lockSettings locks the settings row for one batch: shared for deletes and tombstones, so that
// no policy or floor changes while a batch applies them; exclusive for stamps, which move the
// cursor. When the policies changed since the run read them, it reads them again.
func (j *PurgeJob) lockSettings(tx *gorm.DB, st *runState, exclusive bool) (settingsRow, error) {
	q := `SELECT stamp_generation, stamp_cursor_at, stamp_cursor_id FROM retention_settings FOR SHARE`
	if exclusive {
		q = `SELECT stamp_generation, stamp_cursor_at, stamp_cursor_id FROM retention_settings FOR UPDATE`
	}
	var rows []settingsRow
	if err := tx.Raw(q).Scan(&rows).Error; err != nil {
		return settingsRow{}, err
	}
	if len(rows) != 1 {
		return settingsRow{}, errors.New("the retention_settings row is missing")
	}
	if rows[0].StampGeneration != st.gen {
		set, err := ListPolicies(tx.Statement.Context, tx)
		if err != nil {
			return settingsRow{}, err
		}
		st.rules, st.gen = rulesFor(set, st.operation), rows[0].StampGeneration
	}
	return rows[0], nil
}

func (j *PurgeJob) countDue(ctx context.Context, rep *Report, rules keys.ExpiryRules) error {
	return j.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Read only: a dry run cannot change anything, whatever the SQL below says.
		if err := tx.Exec(`SET TRANSACTION READ ONLY`).Error; err != nil {
			return err
		}
		if err := setTimeout(tx, j.cfg.CountTimeout); err != nil {
			return err
		}
		due, sample, err := keys.CountDue(ctx, tx, rules, j.cfg.ExactUpTo, j.cfg.SampleRows)
		if err != nil {
			return err
		}
		rep.Due, rep.Sample = due, sample
		for _, d := range due {
			if d.Phase == keys.PhaseDelete {
				rep.Deleted += d.N
				rep.DeletedBy.add(d.Operation, d.State, d.N)
			} else {
				rep.Tombstoned += d.N
				rep.TombstonedBy.add(d.Operation, d.State, d.N)
			}
		}
		rep.Complete = true
		return nil
	})
}

func setTimeout(tx *gorm.DB, d time.Duration) error {
	ms := strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	return tx.Exec(`SELECT set_config('statement_timeout', ?, true), set_config('lock_timeout', ?, true)`, ms, ms).Error
}

// setBatch prepares a batch's transaction: its timeouts, and a plan that walks the phase's index
// in order. Right after a large delete the statistics still count the rows it removed, and a
// planner that believes a batch's conditions match a handful of rows may pick a bitmap scan of
// a whole index and sort the result — seconds, where the ordered walk takes milliseconds. JIT
// goes off with them: a disabled plan node's cost would otherwise cross the JIT thresholds and
// compile every batch statement (a short statement of a few thousand rows gains nothing from it).
// Parallel workers go off too: a purge is background work on one core. Counting a day's million
// answers before its drop took 290 ms with two workers and 330 ms without — three processes for a
// tenth of the time, every core the claims had.
func setBatch(tx *gorm.DB, d time.Duration) error {
	ms := strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	return tx.Exec(`SELECT set_config('statement_timeout', ?, true), set_config('lock_timeout', ?, true),
		set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),
		set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`, ms, ms).Error
}

// phaseFn runs one batch of a phase in tx, at most limit rows; it reports the rows it went
// through, whether the phase is over, and what to record once the batch has committed.
type phaseFn func(tx *gorm.DB, limit int) (n int64, done bool, committed func(), err error)

func (j *PurgeJob) purge(ctx context.Context, rep *Report, st *runState, p daemon.Progress) error {
	stampDone, err := j.runPhase(ctx, "stamp", rep, st, true, p, func(tx *gorm.DB, limit int) (int64, bool, func(), error) {
		return j.stampBatch(ctx, tx, rep, st, limit)
	})
	if err != nil {
		return err
	}
	var delCursor keys.ExpiryCursor
	delDone, err := j.runPhase(ctx, "delete", rep, st, false, p, func(tx *gorm.DB, limit int) (int64, bool, func(), error) {
		b, err := keys.DeleteExpiredKeys(ctx, tx, st.rules, delCursor, limit)
		if err != nil {
			return 0, false, nil, err
		}
		// The cursor moves only once the batch's transaction has committed.
		return b.N, b.Done, func() {
			delCursor = b.Next
			for _, c := range b.Counts {
				rep.DeletedBy.add(c.Operation, c.State, c.N)
				rep.Deleted += c.N
			}
		}, nil
	})
	if err != nil {
		return err
	}
	tombDone, err := j.dropResponses(ctx, rep, st, p)
	if err != nil {
		return err
	}
	rep.Complete = stampDone && delDone && tombDone
	return nil
}

// dropResponses is stage one of a key's retention, day by day (partitions of key_responses):
// a day older than yesterday whose answers are all due, but for a few kept ones, goes with its
// partition (keys.DropExpiredResponses), one day per batch transaction; any other day loses its
// due answers row by row (keys.TombstoneDayResponses). A day whose keys changed during the drop
// is left for the next run. A purge limited to one operation never drops a day (a day holds every
// operation's answers).
func (j *PurgeJob) dropResponses(ctx context.Context, rep *Report, st *runState, p daemon.Progress) (ok bool, err error) {
	// The days dropped below are detached under the parent's lock; their tables go at the end,
	// with nobody waiting on them — and with them any a purge detached and then died before
	// dropping (their answers are already gone from every key).
	defer func() {
		if derr := keys.DropDetachedResponses(context.WithoutCancel(ctx), j.db); derr != nil && err == nil {
			ok, err = false, derr
		}
	}()
	if err := claim.EnsureResponsePartitions(ctx, j.db); err != nil {
		return false, err
	}
	days, err := keys.ResponseDays(ctx, j.db)
	if err != nil {
		return false, err
	}
	var today time.Time
	if err := j.db.WithContext(ctx).Raw(`SELECT (now() AT TIME ZONE 'UTC')::date::timestamp`).Scan(&today).Error; err != nil {
		return false, fmt.Errorf("purge tombstone: %w", err)
	}
	// Only the days with work go to batches: a day older than yesterday with no running answer
	// (to drop), or any day with a due answer (row by row if it cannot be dropped). Two index
	// probes a day decide it.
	var work []time.Time
	for _, d := range days {
		if d.After(today) {
			continue // made ahead: nothing stored there yet
		}
		due, running, err := keys.ResponseDayState(ctx, j.db, d)
		if err != nil {
			return false, err
		}
		if due || (!running && d.Before(today.AddDate(0, 0, -1))) {
			work = append(work, d)
		}
	}
	days = work
	if len(days) == 0 {
		return true, nil
	}
	// Per day: a drop when the day is older than yesterday (a day still written to is never
	// dropped), then, for a day not dropped, its due answers row by row.
	next, tried, complete := 0, false, true
	done, err := j.runPhase(ctx, "tombstone", rep, st, false, p, func(tx *gorm.DB, limit int) (int64, bool, func(), error) {
		day, last := days[next], next+1 >= len(days)
		if !tried && st.operation == "" && day.Before(today.AddDate(0, 0, -1)) {
			if err := tx.SavePoint("drop_day").Error; err != nil {
				return 0, false, nil, err
			}
			d, err := keys.DropExpiredResponses(ctx, tx, st.rules, day, rep.Actor, limit)
			if keys.IsResponseDayChanged(err) {
				// Undo this day's moves; the next run meets the day again.
				if err := tx.RollbackTo("drop_day").Error; err != nil {
					return 0, false, nil, err
				}
				return 0, last, func() { next++; complete = false }, nil
			}
			if err != nil {
				return 0, false, nil, err
			}
			return d.N, last && d.Dropped, func() {
				if d.Dropped {
					next++
				} else {
					tried = true
				}
				for _, c := range d.Counts {
					rep.TombstonedBy.add(c.Operation, c.State, c.N)
					rep.Tombstoned += c.N
				}
			}, nil
		}
		b, err := keys.TombstoneDayResponses(ctx, tx, st.rules, day, limit, rep.Actor)
		if err != nil {
			return 0, false, nil, err
		}
		return b.N, last && b.Done, func() {
			if b.Done {
				next, tried = next+1, false
			}
			for _, c := range b.Counts {
				rep.TombstonedBy.add(c.Operation, c.State, c.N)
				rep.Tombstoned += c.N
			}
		}, nil
	})
	return done && complete, err
}

func (j *PurgeJob) stampBatch(ctx context.Context, tx *gorm.DB, rep *Report, st *runState, limit int) (int64, bool, func(), error) {
	s, err := j.lockSettings(tx, st, true)
	if err != nil {
		return 0, false, nil, err
	}
	if len(st.rules.Policies) == 0 {
		// Without policies the stamps claim wrote are the truth: nothing to re-stamp.
		err := tx.Exec(`UPDATE retention_settings SET stamp_cursor_at = now() - ? * interval '1 millisecond', stamp_cursor_id = 0`,
			j.cfg.StampSlack.Milliseconds()).Error
		return 0, true, func() {}, err
	}
	b, err := keys.StampExpiry(ctx, tx, st.rules.Policies, keys.ExpiryCursor{At: s.StampCursorAt, ID: s.StampCursorID}, limit)
	if err != nil {
		return 0, false, nil, err
	}
	done := b.Scanned < int64(limit)
	// Caught up: look again at the last StampSlack next time, for keys whose transaction
	// committed after a later one's.
	if err := tx.Exec(`UPDATE retention_settings SET
			stamp_cursor_at = CASE WHEN ? AND ?::timestamptz > now() - ? * interval '1 millisecond' THEN now() - ? * interval '1 millisecond' ELSE ? END,
			stamp_cursor_id = CASE WHEN ? AND ?::timestamptz > now() - ? * interval '1 millisecond' THEN 0 ELSE ?::bigint END`,
		done, b.Next.At, j.cfg.StampSlack.Milliseconds(), j.cfg.StampSlack.Milliseconds(), b.Next.At,
		done, b.Next.At, j.cfg.StampSlack.Milliseconds(), b.Next.ID).Error; err != nil {
		return 0, false, nil, fmt.Errorf("save stamp cursor: %w", err)
	}
	return b.Scanned, done, func() { rep.Restamped += b.Stamped }, nil
}

// runPhase runs a phase's batches until it is done, MaxRows is reached, the context ends or the
// timeouts run out. Each batch is one transaction with a statement timeout; a timed-out batch
// changes nothing and is tried again, ShrinkAfter timeouts in a row halve the batch (never below
// MinBatchSize), and a random pause separates batches.
func (j *PurgeJob) runPhase(ctx context.Context, phase string, rep *Report, st *runState, exclusive bool, p daemon.Progress, fn phaseFn) (bool, error) {
	var total int64
	inARow := 0
	for {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("purge %s: %w", phase, err)
		}
		limit := int64(rep.BatchSize)
		if left := j.cfg.MaxRows - total; left < limit {
			limit = left
		}
		if limit <= 0 {
			return false, nil
		}
		var n int64
		var done bool
		var committed func()
		err := j.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := setBatch(tx, j.cfg.StatementTimeout); err != nil {
				return err
			}
			if !exclusive {
				if _, err := j.lockSettings(tx, st, false); err != nil {
					return err
				}
			}
			var err error
			n, done, committed, err = fn(tx, int(limit))
			return err
		})
		switch {
		case err == nil:
			committed()
			inARow = 0
			total += n
			p.Report(phase, total, 0)
			if done {
				return true, nil
			}
		case ctx.Err() != nil:
			return false, fmt.Errorf("purge %s: %w", phase, ctx.Err())
		case IsStatementTimeout(err):
			rep.Timeouts++
			inARow++
			if rep.Timeouts >= j.cfg.MaxTimeouts {
				return false, fmt.Errorf("purge %s: %w (%d timeouts, last batch %d)", phase, ErrTooManyTimeouts, rep.Timeouts, rep.BatchSize)
			}
			if inARow >= j.cfg.ShrinkAfter && rep.BatchSize > j.cfg.MinBatchSize {
				rep.BatchSize = max(rep.BatchSize/2, j.cfg.MinBatchSize)
				inARow = 0
				j.cfg.Logger.Warn("purge batch timed out; shrinking", "phase", phase, "batch_size", rep.BatchSize)
			}
		default:
			return false, fmt.Errorf("purge %s: %w", phase, err)
		}
		if err := j.pause(ctx); err != nil {
			return false, fmt.Errorf("purge %s: %w", phase, err)
		}
	}
}

func (j *PurgeJob) pause(ctx context.Context) error {
	d := j.cfg.PauseMin
	if span := j.cfg.PauseMax - j.cfg.PauseMin; span > 0 {
		d += rand.N(span)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsStatementTimeout reports whether err is PostgreSQL cancelling a statement on its
// statement_timeout or lock_timeout (SQLSTATE 57014, 55P03).
func IsStatementTimeout(err error) bool {
	var s interface{ SQLState() string }
	if !errors.As(err, &s) {
		return false
	}
	return s.SQLState() == "57014" || s.SQLState() == "55P03"
}
