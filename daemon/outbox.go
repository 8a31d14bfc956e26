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
)

// Sender delivers one outbox message downstream, carrying the downstream key so that a
// downstream with idempotency dedupes a resend. Wrap an error with Permanent when no retry can
// help (the row fails at once); any other error is retried with backoff.
type Sender interface {
	Send(ctx context.Context, downstreamKey string, payload []byte) error
}

// Looker is implemented by Senders whose downstream has no idempotency: before any resend the
// relay asks whether the document already exists there, and marks the row sent when it does. A
// resend follows only the claim's rule for an unknown outcome (claim.Judge): downstream said
// "not found" twice, a quarantine apart; a lookup that errs never leads to a send.
type Looker interface {
	Lookup(ctx context.Context, downstreamKey string) (bool, error)
}

// Senders finds the Sender for an outbox row's operation.
type Senders interface {
	Get(operation string) (Sender, bool)
}

// SenderMap is a fixed Senders by operation name.
type SenderMap map[string]Sender

// Get returns the Sender for operation.
func (m SenderMap) Get(operation string) (Sender, bool) {
	s, ok := m[operation]
	return s, ok
}

// OutboxJobName is the relay's job (and default schedule) name.
const OutboxJobName = "outbox"

// OutboxConfig tunes the relay. Zero fields take the defaults in one place, withDefaults.
type OutboxConfig struct {
	// BatchSize is how many due rows one claim takes (default 100, at most 1000); MaxPerRun caps
	// a run (default 10000); Workers send a batch concurrently (default 4, at most 64).
	BatchSize int
	MaxPerRun int
	Workers   int
	// MaxAttempts is how many sends a row gets before it is failed (default 10).
	MaxAttempts int
	// BaseBackoff is the pause after the first failed send, doubling per attempt up to
	// MaxBackoff (defaults 1 s and 5 min).
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// SendTimeout bounds one Send or Lookup (default 10 s). SendLease is how long a claimed row
	// stays "sending" before another relay may take it (default SendTimeout + 30 s; it must
	// exceed SendTimeout, so a row in flight is never taken). Each send renews it just before it
	// goes out (the fence), so rows waiting behind slow sends of their batch lapse and are taken
	// by another run, but a send in flight is never.
	SendTimeout time.Duration
	SendLease   time.Duration
	// Quarantine separates the two "not found" answers of a Looker downstream that prove an
	// earlier send with an unknown outcome never arrived (default 30 s, as the claim's): choose
	// it longer than the downstream may take to act on a send its sender gave up on.
	Quarantine time.Duration
	Logger     *slog.Logger
}

func (c OutboxConfig) withDefaults() (OutboxConfig, error) {
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.MaxPerRun == 0 {
		c.MaxPerRun = 10000
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.BaseBackoff == 0 {
		c.BaseBackoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 10 * time.Second
	}
	if c.SendLease == 0 {
		c.SendLease = c.SendTimeout + 30*time.Second
	}
	if c.Quarantine == 0 {
		c.Quarantine = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 1000:
		return c, configErr("outbox batch size", "%d is outside 1..1000", c.BatchSize)
	case c.MaxPerRun < 1 || c.MaxPerRun > 10_000_000:
		return c, configErr("outbox max per run", "%d is outside 1..10000000", c.MaxPerRun)
	case c.Workers < 1 || c.Workers > 64:
		return c, configErr("outbox workers", "%d is outside 1..64", c.Workers)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return c, configErr("outbox max attempts", "%d is outside 1..100", c.MaxAttempts)
	case c.BaseBackoff <= 0 || c.MaxBackoff < c.BaseBackoff:
		return c, configErr("outbox backoff", "base %s must be positive and at most the max %s", c.BaseBackoff, c.MaxBackoff)
	case c.SendTimeout <= 0 || c.SendLease <= c.SendTimeout:
		return c, configErr("outbox send lease", "%s must exceed the send timeout %s", c.SendLease, c.SendTimeout)
	case c.Quarantine < 0 || c.Quarantine > 24*time.Hour:
		return c, configErr("outbox quarantine", "%s is outside 0..24h", c.Quarantine)
	}
	return c, nil
}

// Backoff is the pause after the attempt-th failed send: BaseBackoff doubling per attempt, at
// most MaxBackoff.
func (c OutboxConfig) Backoff(attempt int) time.Duration {
	d := c.BaseBackoff
	for i := 1; i < attempt && d < c.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.MaxBackoff)
}

// OutboxRelay sends the outbox rows business transactions staged, after they committed. A row
// goes pending → sending (claimed, attempts + 1, held for SendLease) → sent, or back to pending
// with a backoff after a failed send, or failed after MaxAttempts (its attempts and last_error
// stay on the row).
//
// Every send is fenced on its run's claim: just before it goes out, a compare-and-set on the
// row's attempt (still this run's claim, not lapsed) counts the send and renews the claim for
// SendLease. A run whose claim lapsed — its rows waited behind slow sends, a deposed leader
// finishing its batch, two runs overlapping — sends nothing. A row whose earlier send began
// (sends > 0) and was never recorded as sent has an unknown outcome: the next relay resends it
// under the same downstream key (idempotent downstreams dedupe it) or, for a Looker, settles it
// by the claim's rule (claim.Judge): found → sent; not found → look again a Quarantine later,
// and send only on that second not-found; the lookup fails → back to pending, never sent.
type OutboxRelay struct {
	db      *gorm.DB
	senders Senders
	cfg     OutboxConfig
	m       *prometheus.CounterVec
}

// NewOutboxRelay validates cfg and returns the relay.
func NewOutboxRelay(db *gorm.DB, senders Senders, cfg OutboxConfig) (*OutboxRelay, error) {
	if db == nil || senders == nil {
		return nil, configErr("outbox", "a database and a senders registry are required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &OutboxRelay{db: db, senders: senders, cfg: cfg, m: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemops", Subsystem: "outbox", Name: "messages_total",
		Help: "Outbox sends by outcome (sent, found_downstream, not_found, retry, failed, released, lost_claim, panicked, error).",
	}, []string{"outcome"})}, nil
}

// Name is "outbox".
func (r *OutboxRelay) Name() string { return OutboxJobName }

// Collectors are the relay's metrics.
func (r *OutboxRelay) Collectors() []prometheus.Collector { return []prometheus.Collector{r.m} }

// outbox outcomes, the keys of its Stats.
const (
	obClaimed   = "claimed"
	obSent      = "sent"
	obFound     = "found_downstream"
	obRetry     = "retry"
	obFailed    = "failed"
	obReleased  = "released"
	obLostClaim = "lost_claim"
	obNotFound  = "not_found"
	obPanicked  = "panicked"
	obError     = "error"
)

// outboxClaimSQL claims due rows: pending ones, and sending ones whose holder's SendLease ran out
// (it died mid-send). outbox_due_idx serves it; SKIP LOCKED lets relays split the work. The
// attempt is counted here, before the send, so a crash after the send is never mistaken for
// "never sent". Rows of a tenant fenced for a move between cells (cell_fences) wait: the move
// carries them to the tenant's new cell, whose relay sends them (the fence would refuse the
// claim's update, and the whole batch with it). With no fence in the cell — always, but during a
// move — that check is one probe of the empty table per statement.
const outboxClaimSQL = `
WITH picked AS (
    SELECT id FROM outbox
    WHERE state IN ('pending', 'sending') AND next_attempt_at <= now()
      AND (NOT EXISTS (SELECT FROM cell_fences) OR NOT EXISTS (SELECT FROM idempotency_keys k JOIN cell_fences f ON f.tenant = k.tenant
          WHERE k.id = outbox.key_id))
    ORDER BY next_attempt_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox o SET state = 'sending', attempts = o.attempts + 1,
    next_attempt_at = now() + ? * interval '1 millisecond'
FROM picked WHERE o.id = picked.id
RETURNING o.id, o.operation, o.downstream_key, o.payload::text AS payload, o.attempts, o.sends, o.not_found_at`

type claimedMessage struct {
	ID            int64
	Operation     string
	DownstreamKey string
	Payload       string
	Attempts      int
	// Sends is how many sends of the row began; NotFoundAt the first "not found" since the last.
	Sends      int
	NotFoundAt *time.Time
}

// RunOnce relays due rows batch by batch until none is due, MaxPerRun is reached, or the daemon
// asks it to stop (it finishes the batch in hand and returns ErrStopped).
func (r *OutboxRelay) RunOnce(ctx context.Context, _ []byte, p Progress) (Stats, error) {
	stats := Stats{}
	var mu sync.Mutex
	count := func(outcome string) {
		mu.Lock()
		stats[outcome]++
		mu.Unlock()
		r.m.WithLabelValues(outcome).Inc()
	}
	var recovered panics
	done := 0
	for done < r.cfg.MaxPerRun {
		if ShouldStop(ctx) {
			return stats, stopErr(ctx)
		}
		var batch []claimedMessage
		err := r.db.WithContext(ctx).Raw(outboxClaimSQL, min(r.cfg.BatchSize, r.cfg.MaxPerRun-done),
			r.cfg.SendLease.Milliseconds()).Scan(&batch).Error
		if err != nil {
			return stats, fmt.Errorf("claim outbox rows: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		stats[obClaimed] += int64(len(batch))
		r.relayBatch(ctx, batch, count, &recovered)
		done += len(batch)
		p.Report("relay", int64(done), 0)
	}
	return stats, recovered.err("senders", "their rows are back to pending, and an earlier send counts as possibly delivered")
}

// relayBatch sends a batch with a small worker pool.
func (r *OutboxRelay) relayBatch(ctx context.Context, batch []claimedMessage, count func(string), recovered *panics) {
	work := make(chan claimedMessage)
	var wg sync.WaitGroup
	for range min(r.cfg.Workers, len(batch)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				count(r.relayOneSafely(ctx, m, recovered))
			}
		}()
	}
	for _, m := range batch {
		work <- m
	}
	close(work)
	wg.Wait()
}

// relayOneSafely is relayOne with a panic outside the Sender recovered too: the row stays
// sending until its claim lapses, and is then taken again (an earlier send counted, if one began).
func (r *OutboxRelay) relayOneSafely(ctx context.Context, m claimedMessage, recovered *panics) (outcome string) {
	defer func() {
		if p := claim.RecoveredPanic("relay", recover()); p != nil {
			r.cfg.Logger.Error("outbox worker panicked", "job", OutboxJobName, "outbox_id", m.ID, "panic_type", p.Type)
			recovered.add(p)
			outcome = obPanicked
		}
	}()
	return r.relayOne(ctx, m, recovered)
}

// relayOne sends one claimed row and records the result. A Sender's panic is recovered here, as
// what it is: a Lookup that could not answer, or a send whose outcome is unknown.
func (r *OutboxRelay) relayOne(ctx context.Context, m claimedMessage, recovered *panics) string {
	log := r.cfg.Logger.With("job", OutboxJobName, "outbox_id", m.ID, "operation", m.Operation)
	if ctx.Err() != nil {
		// Cut short before any send: hand the row back untouched by this attempt.
		return r.release(ctx, m)
	}
	s, ok := r.senders.Get(m.Operation)
	if !ok {
		return r.failed(ctx, m, fmt.Errorf("no sender registered for operation %s", m.Operation), false)
	}
	// An earlier send may have reached downstream (it timed out, or its relay died before
	// recording it): a downstream without idempotency is asked first, by the claim's rule.
	if lk, ok := s.(Looker); ok && m.Sends > 0 {
		if outcome, settled := r.settleUnknown(ctx, lk, m, log, recovered); settled {
			return outcome
		}
	}
	if outcome, ok := r.fence(ctx, m, log); !ok {
		return outcome
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	err := sendSafely(sctx, s, m)
	cancel()
	if p := (*claim.PanicError)(nil); errors.As(err, &p) {
		log.Error("sender panicked; the send's outcome is unknown", "panic_type", p.Type)
		recovered.add(p)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Stopped mid-send: whether it arrived is unknown. The row stays sending until its
			// lease runs out; the next relay treats it as possibly sent.
			return obError
		}
		return r.failed(ctx, m, err, errors.Is(err, ErrPermanent))
	}
	// Downstream acted: record it even if the run is being cancelled.
	if err := r.markSent(context.WithoutCancel(ctx), m); err != nil {
		log.Warn("outbox row not marked sent; it will be resent under its downstream key", "err", err)
		return obError
	}
	return obSent
}

// settleUnknown looks up a row whose earlier send has an unknown outcome and settles it by
// claim.Judge. settled false: downstream proved absence (two not-founds a quarantine apart) and
// the row may be sent.
func (r *OutboxRelay) settleUnknown(ctx context.Context, lk Looker, m claimedMessage, log *slog.Logger, recovered *panics) (outcome string, settled bool) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	found, err := lookupSafely(lctx, lk, m)
	cancel()
	if p := (*claim.PanicError)(nil); errors.As(err, &p) {
		log.Error("looker panicked; nothing is sent", "panic_type", p.Type)
		recovered.add(p)
	}
	switch claim.Judge(found, err, m.NotFoundAt, r.cfg.Quarantine) {
	case claim.AskLater:
		return r.failed(ctx, m, fmt.Errorf("lookup before resend: %w", err), false), true
	case claim.Found:
		if err := r.markSent(context.WithoutCancel(ctx), m); err != nil {
			log.Warn("outbox row not marked sent", "err", err)
			return obError, true
		}
		return obFound, true
	case claim.NotFoundOnce:
		return r.notFoundOnce(ctx, m), true
	}
	return "", false
}

// sendSafely is Send with a panic recovered as an error (the send's outcome is unknown).
func sendSafely(ctx context.Context, s Sender, m claimedMessage) (err error) {
	defer func() {
		if p := claim.RecoveredPanic("send", recover()); p != nil {
			err = p
		}
	}()
	return s.Send(ctx, m.DownstreamKey, []byte(m.Payload))
}

// lookupSafely is Lookup with a panic recovered as an error (a lookup that could not answer).
func lookupSafely(ctx context.Context, lk Looker, m claimedMessage) (found bool, err error) {
	defer func() {
		if p := claim.RecoveredPanic("lookup", recover()); p != nil {
			found, err = false, p
		}
	}()
	return lk.Lookup(ctx, m.DownstreamKey)
}

// notFoundOnce records downstream's first "not found" after a send with an unknown outcome and
// hands the row back, due again once the quarantine has passed since that first not-found. The
// compare-and-set on attempts leaves a row another relay has taken since alone.
func (r *OutboxRelay) notFoundOnce(ctx context.Context, m claimedMessage) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	res := r.db.WithContext(ctx).Exec(`UPDATE outbox SET state = 'pending', not_found_at = COALESCE(not_found_at, now()),
		next_attempt_at = COALESCE(not_found_at, now()) + ? * interval '1 millisecond',
		last_error = 'an earlier send may still be in flight: downstream said not found; looking again after the quarantine'
		WHERE id = ? AND state = 'sending' AND attempts = ?`, r.cfg.Quarantine.Milliseconds(), m.ID, m.Attempts)
	switch {
	case res.Error != nil:
		r.cfg.Logger.Warn("outbox not-found not recorded", "outbox_id", m.ID, "err", res.Error)
		return obError
	case res.RowsAffected == 0:
		return obLostClaim
	}
	return obNotFound
}

// fence is the compare-and-set just before a send: the row is still this run's claim (sending,
// at this attempt) and the claim has not lapsed. It counts the send (from here on its outcome is
// unknown until recorded), uses up a not-found proof, and renews the claim for SendLease, which
// exceeds SendTimeout: no other relay takes the row while the send is in flight. ok false: send
// nothing.
func (r *OutboxRelay) fence(ctx context.Context, m claimedMessage, log *slog.Logger) (outcome string, ok bool) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res := r.db.WithContext(fctx).Exec(`UPDATE outbox SET sends = sends + 1, not_found_at = NULL,
		next_attempt_at = now() + ? * interval '1 millisecond'
		WHERE id = ? AND state = 'sending' AND attempts = ? AND next_attempt_at > now()`,
		r.cfg.SendLease.Milliseconds(), m.ID, m.Attempts)
	switch {
	case res.Error != nil:
		// Nothing was sent; whether the count committed is unknown, so the row may be looked up
		// before its next send (the safe side).
		log.Warn("outbox send not fenced; nothing sent", "err", res.Error)
		return obError, false
	case res.RowsAffected == 0:
		log.Info("outbox claim lapsed before the send; nothing sent")
		return obLostClaim, false
	}
	return "", true
}

// markSent records delivery. Sent is the truth whoever holds the row now, so it is not a
// compare-and-set on the attempt.
func (r *OutboxRelay) markSent(ctx context.Context, m claimedMessage) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.db.WithContext(ctx).Exec(`UPDATE outbox SET state = 'sent', sent_at = now(), last_error = NULL
		WHERE id = ? AND state <> 'sent'`, m.ID).Error
}

// failed records a failed attempt: back to pending with a backoff, or failed once the attempts
// are used up (or the error is permanent). The compare-and-set on attempts leaves a row that
// another relay has taken since alone.
func (r *OutboxRelay) failed(ctx context.Context, m claimedMessage, sendErr error, permanent bool) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	state, outcome := "pending", obRetry
	if permanent || m.Attempts >= r.cfg.MaxAttempts {
		state, outcome = "failed", obFailed
	}
	msg := oneLine(sendErr.Error())
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	res := r.db.WithContext(ctx).Exec(`UPDATE outbox SET state = ?, last_error = ?,
		next_attempt_at = now() + ? * interval '1 millisecond'
		WHERE id = ? AND state = 'sending' AND attempts = ?`,
		state, msg, r.cfg.Backoff(m.Attempts).Milliseconds(), m.ID, m.Attempts)
	if res.Error != nil {
		r.cfg.Logger.Warn("outbox failure not recorded", "outbox_id", m.ID, "err", res.Error)
		return obError
	}
	if res.RowsAffected == 0 {
		return obLostClaim
	}
	if outcome == obFailed {
		r.cfg.Logger.Warn("outbox row failed", "outbox_id", m.ID, "operation", m.Operation, "attempts", m.Attempts, "err", msg)
	}
	return outcome
}

// release hands back a row claimed but never sent (the run was cut short): the attempt did not
// happen, so it is not counted.
func (r *OutboxRelay) release(ctx context.Context, m claimedMessage) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	res := r.db.WithContext(ctx).Exec(`UPDATE outbox SET state = 'pending',
		attempts = attempts - 1, next_attempt_at = now()
		WHERE id = ? AND state = 'sending' AND attempts = ?`, m.ID, m.Attempts)
	if res.Error != nil {
		return obError
	}
	return obReleased
}

// OutboxRow is one outbox row as the console shows it.
type OutboxRow struct {
	ID            int64
	KeyID         *int64
	Operation     string
	DownstreamKey string
	State         string
	Attempts      int
	NextAttemptAt time.Time
	LastError     *string
	CreatedAt     time.Time
	SentAt        *time.Time
}

// OutboxFilter selects rows for ListOutbox; zero fields do not filter.
type OutboxFilter struct {
	State    string // pending, sending, sent, failed
	BeforeID int64  // keyset: only rows with a smaller id
	Limit    int    // at most 500 (0: 50)
}

// ListOutbox returns outbox rows newest first, without payloads.
func ListOutbox(ctx context.Context, db *gorm.DB, f OutboxFilter) ([]OutboxRow, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	q := db.WithContext(ctx).Table("outbox").Select(`id, key_id, operation, downstream_key, state, attempts,
		next_attempt_at, last_error, created_at, sent_at`)
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	var rows []OutboxRow
	if err := q.Order("id DESC").Limit(f.Limit).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return rows, nil
}

// RetryOutbox gives a failed row one more attempt, due now. Its attempt and send counts are
// kept, so a Looker downstream is asked before a resend, and a further failure fails it again. It
// returns an error wrapping ErrInvalidConfig when the row is not failed.
func RetryOutbox(ctx context.Context, db *gorm.DB, id int64) error {
	res := db.WithContext(ctx).Exec(`UPDATE outbox SET state = 'pending', next_attempt_at = now()
		WHERE id = ? AND state = 'failed'`, id)
	if res.Error != nil {
		return fmt.Errorf("retry outbox row %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return configErr("outbox row", "%d is not a failed row", id)
	}
	return nil
}
