package claim

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// State is where a key stands.
type State string

const (
	StateProcessing      State = "processing"
	StateCompleted       State = "completed"
	StateFailedRetryable State = "failed_retryable"
	StateFailedFinal     State = "failed_final"
)

// States lists every key state in lifecycle order; claim is the one place that says which
// states exist (the console's state filter and forms ask here).
func States() []State {
	return []State{StateProcessing, StateCompleted, StateFailedRetryable, StateFailedFinal}
}

// Settled reports whether a key in state s holds its answer for good: completed and failed_final
// keys are replayed to every later request and never executed again. Processing and
// failed_retryable keys are not: a later attempt, the reclaimer or an operator may still execute
// them (or complete them from the document downstream).
func (s State) Settled() bool { return s == StateCompleted || s == StateFailedFinal }

// Ended reports whether a key in state s is done with its attempt (every state but processing):
// the states a retention policy names, since a processing key is never purged.
func (s State) Ended() bool { return s.Valid() && s != StateProcessing }

// StatesWhere lists the states for which rule holds, in lifecycle order.
func StatesWhere(rule func(State) bool) []State {
	var out []State
	for _, s := range States() {
		if rule(s) {
			out = append(out, s)
		}
	}
	return out
}

// SQLList writes states as a SQL list of literals, ('processing', 'failed_retryable'), for a
// statement that filters the state column by one of claim's rules; the values are claim's
// constants, never input.
func SQLList(states []State) string {
	q := make([]string, len(states))
	for i, s := range states {
		q[i] = s.SQL()
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// SQL writes s as a SQL literal, 'completed' (see SQLList).
func (s State) SQL() string { return "'" + string(s) + "'" }

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	switch s {
	case StateProcessing, StateCompleted, StateFailedRetryable, StateFailedFinal:
		return true
	}
	return false
}

// Config tunes a Store. Zero fields take the defaults in one place, withDefaults.
type Config struct {
	// Owner names this process in lease_owner (default host:pid).
	Owner string
	// TracerProvider traces the claim path (default: OpenTelemetry's global provider, a no-op
	// unless one was installed).
	TracerProvider trace.TracerProvider
	// LeaseTTL is how long a claim holds the key without renewal (default 30 s); the holder
	// renews every LeaseTTL/3.
	LeaseTTL time.Duration
	// Quarantine separates the two downstream not-founds that prove an earlier attempt never
	// arrived (default 30 s).
	Quarantine time.Duration
	// LookupAttempts is how many failed downstream lookups flag a key "needs attention"
	// (default 5); LookupBackoff is the first pause after one (default 5 s, doubling, ≤ 5 min).
	LookupAttempts int
	LookupBackoff  time.Duration
	// DigestSecret keys the HMAC of key digests; at least 16 bytes.
	DigestSecret []byte
	// KeepResponse and KeepKey are the default retention periods set when a key reaches a
	// final state (defaults 72 h and 30 days); retention policies may change them later.
	KeepResponse, KeepKey time.Duration
	// MaxSnapshotBytes bounds a stored response body (default 64 KiB).
	MaxSnapshotBytes int
	// ReconnectWindow bounds how long a write whose connection was lost (a failover, a killed
	// backend) keeps re-reading the key to learn whether it committed (default 30 s).
	ReconnectWindow time.Duration
	Logger          *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.Quarantine == 0 {
		c.Quarantine = 30 * time.Second
	}
	if c.LookupAttempts == 0 {
		c.LookupAttempts = 5
	}
	if c.LookupBackoff == 0 {
		c.LookupBackoff = 5 * time.Second
	}
	if c.KeepResponse == 0 {
		c.KeepResponse = 72 * time.Hour
	}
	if c.KeepKey == 0 {
		c.KeepKey = 30 * 24 * time.Hour
	}
	if c.MaxSnapshotBytes == 0 {
		c.MaxSnapshotBytes = 64 << 10
	}
	if c.ReconnectWindow == 0 {
		c.ReconnectWindow = DefaultReconnectWindow
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case len(c.DigestSecret) < 16:
		return c, errors.New("claim: DigestSecret must be at least 16 bytes")
	case c.LeaseTTL < time.Second:
		return c, errors.New("claim: LeaseTTL must be at least 1s")
	case c.KeepResponse > c.KeepKey:
		return c, errors.New("claim: KeepResponse must not exceed KeepKey")
	}
	return c, nil
}

// Store is the one claim logic. Services, the daemon, reconciliation fixes and operators all go
// through its methods; nothing else writes idempotency_keys.
type Store struct {
	db  *gorm.DB
	cfg Config
	// partitionsDay is the day (Unix days) the store last ensured the response partitions.
	partitionsDay atomic.Int64
	// claimDetail is the detail of every claim's claimed event (first attempt, this owner).
	claimDetail string
	tracer      trace.Tracer
	tracing     bool // tracer records: spans and trace ids in event details
	// keepResponseSecs and keepKeySecs are the keep periods in seconds, as statement arguments
	// (boxed once: every completion and failure passes them).
	keepResponseSecs, keepKeySecs any
}

// NewStore validates cfg and returns a Store on db.
func NewStore(db *gorm.DB, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tracer, tracing := newTracer(cfg.TracerProvider)
	return &Store{db: db, cfg: cfg, claimDetail: detailJSON("attempt", 1, "owner", cfg.Owner), tracer: tracer, tracing: tracing,
		keepResponseSecs: int64(cfg.KeepResponse.Seconds()), keepKeySecs: int64(cfg.KeepKey.Seconds())}, nil
}

// conn is the connection (pool or transaction) a gorm handle holds: the hot paths run their SQL
// on it directly, without gorm's reflection.
func conn(db *gorm.DB) gorm.ConnPool { return db.Statement.ConnPool }

// Config returns the effective configuration.
func (s *Store) Config() Config { return s.cfg }

// DB returns the handle the store writes through.
func (s *Store) DB() *gorm.DB { return s.db }

// Digest is the log-safe digest of a key under this deployment's secret.
func (s *Store) Digest(tenant, operation, key string) string {
	return Digest(s.cfg.DigestSecret, tenant, operation, key)
}

// Request is one attempt to perform an operation under an idempotency key.
type Request struct {
	// Tenant is the authenticated caller, taken from the verified credential by the caller of
	// Claim — never from a header or body field the client controls.
	Tenant    string
	Operation string
	// Key is the client's idempotency key. (An operation whose identity is a natural key keeps
	// it as a unique constraint on its own domain table, DomainKey, not here.)
	Key string
	// Intent is the request body (a JSON object).
	Intent json.RawMessage
	// Spec says which fields carry intent; Run takes it from the Operation.
	Spec IntentSpec
	// Actor is recorded on every event: service:NAME, daemon, operator:NAME.
	Actor string
}

// Kind is the outcome of a claim or a run.
type Kind string

const (
	// Acquired: the caller holds the lease and may proceed (Run does the rest).
	Acquired Kind = "acquired"
	// Replay: the key is completed or failed_final; Snapshot (and Failure) are its answer.
	Replay Kind = "replay"
	// InProgress: another attempt holds the key; retry after RetryAfter.
	InProgress Kind = "in_progress"
	// Mismatch: the key was used with a different intent (ErrMismatch).
	Mismatch Kind = "mismatch"
	// Expired: the key's response was purged by retention; only the tombstone remains.
	Expired Kind = "expired"
	// Completed: this run executed the operation and completed the key.
	Completed Kind = "completed"
	// Recovered: downstream already had the document; the key was completed from it without
	// executing anything.
	Recovered Kind = "recovered"
	// Failed: this run's attempt failed; Failure says how.
	Failed Kind = "failed"
)

// Outcome is what Claim or Run answers.
type Outcome struct {
	Kind       Kind
	KeyID      int64
	Digest     string
	State      State
	Lease      *Lease        // Acquired
	Snapshot   *Snapshot     // Replay, Completed, Recovered, and Failed/Replay of a failure that stored one
	Failure    *Failure      // Failed, and Replay of failed_final
	ResourceID string        // Replay, Expired, Completed, Recovered
	RetryAfter time.Duration // InProgress
}

// Lease is the right to write a key, held by whoever acquired it. Every write through a Lease is
// a compare-and-set on Token: once another party takes the key over, the old holder's writes
// fail with ErrLeaseLost and change nothing.
type Lease struct {
	KeyID         int64
	Tenant        string
	Operation     string
	Key           string
	Digest        string
	DownstreamKey string
	Intent        json.RawMessage // canonical intent
	Amount        *int64
	Currency      string
	Token         string
	Attempt       int
	// Takeover: an earlier attempt's lease expired; it may have reached downstream.
	Takeover bool
	// Retry: the key was failed_retryable; an earlier attempt may have reached downstream.
	Retry bool
	// NotFoundAt is the first downstream not-found recorded for this key, if any.
	NotFoundAt *time.Time
	Actor      string
	// ChannelAccount is the channel account (the merchant id at a payment channel, as
	// reconciliation names it) the holder's downstream call goes through. Whoever calls
	// downstream — the Operation's Execute or Lookup, a wrapped handler — sets it; the key keeps
	// it with its completion or failure (a later write without one keeps the recorded one), and
	// a statement is matched only against the keys of its account.
	ChannelAccount string
}

// MustCheckDownstream says whether an earlier attempt may have reached downstream, so that the
// holder has to look the document up before executing.
func (l *Lease) MustCheckDownstream() bool { return l.Takeover || l.Retry }

// prepared is a validated request.
type prepared struct {
	Request
	intent *Intent
	digest string
	dkey   string
}

func (s *Store) prepare(req Request) (*prepared, error) {
	if err := validateScope(req.Tenant, req.Operation); err != nil {
		return nil, err
	}
	in, err := Canonicalize(req.Intent, req.Spec)
	if err != nil {
		return nil, err
	}
	if err := ValidateKey(req.Key); err != nil {
		return nil, err
	}
	if req.Actor == "" {
		req.Actor = "service:" + req.Operation
	}
	return &prepared{
		Request: req,
		intent:  in,
		digest:  s.Digest(req.Tenant, req.Operation, req.Key),
		dkey:    DownstreamKey(req.Tenant, req.Operation, req.Key),
	}, nil
}

func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	var t [36]byte // 8-4-4-4-12 hex digits, written in place (one allocation: the string)
	hex.Encode(t[0:8], b[0:4])
	hex.Encode(t[9:13], b[4:6])
	hex.Encode(t[14:18], b[6:8])
	hex.Encode(t[19:23], b[8:10])
	hex.Encode(t[24:36], b[10:16])
	t[8], t[13], t[18], t[23] = '-', '-', '-', '-'
	return string(t[:])
}

// detailJSON is an event's detail: a JSON object of the key/value pairs in kv. It runs on every
// claim and completion, so the common values (integers, booleans, plain ASCII strings) are
// appended by hand; anything else goes through encoding/json. Key order is kept (jsonb
// normalizes it when stored).
func detailJSON(kv ...any) string {
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, kv[i].(string))
		b = append(b, ':')
		switch v := kv[i+1].(type) {
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case string:
			b = appendJSONString(b, v)
		default:
			j, err := json.Marshal(v)
			if err != nil {
				j = []byte("null")
			}
			b = append(b, j...)
		}
	}
	return string(append(b, '}'))
}

// appendJSONString appends s as a JSON string: as is when it is printable ASCII with nothing to
// escape, else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// claimSQL is the claim: one atomic insert guarded by the unique constraint on (tenant,
// operation, key), with its history event on the row itself (claimed_*, read back through the
// key_history view; migration 00059): no key_events row on the happy path. Never "select, then
// insert". The conflict target is left open on purpose: the downstream key is unique too
// (derived from the same triple), and two racing inserts of one key may meet on either index
// first; naming one arbiter would turn the other into an error.
//
// A tenant fenced for a move between cells (cell_fences, migration 00135) gets no new key: the
// fence is read in the same statement (one probe of its primary key, run once), not by the
// table's fence trigger, which skips an insert that carries a lease so that the claim path pays
// no trigger call. No row comes back then, as for a key that exists; answerExisting tells the two
// apart.
const claimSQL = `
INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
    request, state, lease_owner, lease_token, lease_expires_at, downstream_key, amount_minor, currency,
    claimed_event_id, claimed_by, claimed_detail)
SELECT $1, $2, $3, $4, $5, $6, $7, 'processing', $8, $9, now() + $10 * interval '1 millisecond', $11, $12, NULLIF($13, ''),
    nextval('key_events_id_seq'), $14, $15
WHERE NOT EXISTS (SELECT FROM cell_fences WHERE tenant = $1)
ON CONFLICT DO NOTHING
RETURNING id`

// Claim takes the key for req, or says why not. Acquired leases must end in Complete, Fail,
// Release or one of the lookup records; Run does all of that.
func (s *Store) Claim(ctx context.Context, req Request) (*Outcome, error) {
	p, err := s.prepare(req)
	if err != nil {
		return nil, err
	}
	if !s.tracing {
		return s.claimPrepared(ctx, p)
	}
	ctx, span := s.startSpan(ctx, "idemops.claim", p.digest, p.Operation, 0)
	out, err := s.claimPrepared(ctx, p)
	if err == nil && span.IsRecording() {
		span.SetAttributes(attribute.String("idemops.outcome", string(out.Kind)))
	}
	endSpan(span, err)
	return out, err
}

func (s *Store) claimPrepared(ctx context.Context, p *prepared) (*Outcome, error) {
	// Bounded: each round either inserts, answers from the existing row, or loses a race to a
	// concurrent transition (or purge) of that row and reads it again.
	for round := 0; round < 5; round++ {
		token := newToken()
		var id int64
		err := conn(s.db).QueryRowContext(ctx, claimSQL,
			p.Tenant, p.Operation, p.Key, p.digest, p.intent.Fingerprint, p.intent.Version,
			string(p.intent.Canonical), s.cfg.Owner, token, s.cfg.LeaseTTL.Milliseconds(), p.dkey,
			p.intent.Amount, p.intent.Currency,
			p.Actor, s.traceDetail(ctx, s.claimDetail),
		).Scan(&id)
		if ConnLost(err) {
			// The insert may have committed before the connection went: re-read the key and
			// never run the claim again blindly. Our token on the row means it is ours; no row
			// (or another's) sends the next round to the guarded insert again.
			mine, rerr := s.claimedBy(ctx, p, token)
			if rerr != nil {
				return nil, fmt.Errorf("claim %s: outcome unknown after a lost connection (%v): %w", p.digest, err, rerr)
			}
			if mine != 0 {
				return &Outcome{Kind: Acquired, KeyID: mine, Digest: p.digest, State: StateProcessing,
					Lease: p.lease(mine, token, 1, false, false, nil)}, nil
			}
			continue
		}
		switch {
		case err == nil:
			return &Outcome{Kind: Acquired, KeyID: id, Digest: p.digest, State: StateProcessing,
				Lease: p.lease(id, token, 1, false, false, nil)}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("claim %s: %w", p.digest, err)
		}
		out, err := s.answerExisting(ctx, p)
		if errors.Is(err, errRaced) {
			continue
		}
		return out, err
	}
	return nil, fmt.Errorf("claim %s: the key kept changing under concurrent writers", p.digest)
}

var errRaced = errors.New("raced")

// claimedBy re-reads a key after a claim lost its connection: its id when the row carries
// token (the insert committed), 0 when there is no row or another holder's.
func (s *Store) claimedBy(ctx context.Context, p *prepared, token string) (int64, error) {
	var ids []int64
	err := s.reread(ctx, func(ctx context.Context) error {
		ids = ids[:0]
		return s.db.WithContext(ctx).Raw(`SELECT id FROM idempotency_keys WHERE tenant = ? AND operation = ? AND key = ?
			AND lease_token = ?::uuid`, p.Tenant, p.Operation, p.Key, token).Scan(&ids).Error
	})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[0], nil
}

func (p *prepared) lease(id int64, token string, attempt int, takeover, retry bool, notFoundAt *time.Time) *Lease {
	return &Lease{KeyID: id, Tenant: p.Tenant, Operation: p.Operation, Key: p.Key, Digest: p.digest,
		DownstreamKey: p.dkey, Intent: p.intent.Canonical, Amount: p.intent.Amount, Currency: p.intent.Currency,
		Token: token, Attempt: attempt, Takeover: takeover, Retry: retry, NotFoundAt: notFoundAt, Actor: p.Actor}
}

// existingRow is what a claim that lost the insert needs to know of the row that won.
type existingRow struct {
	ID                 int64
	Fingerprint        string
	FingerprintVersion int
	Request            string
	State              State
	Version            int64
	LeaseExpired       bool
	LeaseRemainingMs   int64
	LeaseHeld          bool
	ResponseStatus     *int
	ResponseHeaders    []byte
	ResponseBody       []byte
	ResourceID         *string
	ErrorCode          *string
	ErrorDetail        *string
	ResponseExpired    bool
	NotFoundAt         *time.Time
	Held               bool
	RetryCleared       bool
}

const existingSQL = `
SELECT k.id, fingerprint, fingerprint_version, request::text AS request, state, version,
       COALESCE(lease_expires_at < now(), false) AS lease_expired,
       COALESCE((extract(epoch FROM lease_expires_at - now()) * 1000)::bigint, 0) AS lease_remaining_ms,
       lease_token IS NOT NULL AS lease_held,
       r.status AS response_status, r.headers AS response_headers, r.body AS response_body, resource_id, error_code, error_detail,
       (response_expires_at IS NOT NULL AND response_expires_at < now()) OR
       (r.status IS NULL AND completed_at IS NOT NULL AND state = 'completed') AS response_expired,
       not_found_at, held, retry_cleared
FROM idempotency_keys k LEFT JOIN key_responses r ON r.key_id = k.id AND r.day = k.response_day
WHERE tenant = ? AND operation = ? AND key = ?`

// answerExisting answers a claim whose insert met an existing row: the loser of a claim race
// reads the row and answers from it; it never executes.
func (s *Store) answerExisting(ctx context.Context, p *prepared) (*Outcome, error) {
	var rows []existingRow
	if err := s.db.WithContext(ctx).Raw(existingSQL, p.Tenant, p.Operation, p.Key).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("claim %s: read existing: %w", p.digest, err)
	}
	if len(rows) == 0 {
		if err := s.fence(ctx, p.Tenant); err != nil {
			return nil, fmt.Errorf("claim %s: %w", p.digest, err)
		}
		return nil, errRaced // purged between the insert and the read
	}
	r := rows[0]
	out := &Outcome{KeyID: r.ID, Digest: p.digest, State: r.State}
	if !sameIntent(r, p.intent, p.Spec) {
		s.event(ctx, s.db, r.ID, "mismatch_rejected", p.Actor, detailJSON("fingerprint", p.intent.Fingerprint))
		out.Kind = Mismatch
		return out, nil
	}
	if r.ResourceID != nil {
		out.ResourceID = *r.ResourceID
	}
	switch r.State {
	case StateCompleted, StateFailedFinal:
		if r.ResponseExpired {
			out.Kind = Expired
			return out, nil
		}
		out.Kind = Replay
		out.Snapshot = r.snapshot()
		if r.State == StateFailedFinal {
			out.Failure = &Failure{Code: deref(r.ErrorCode), Detail: deref(r.ErrorDetail), Snapshot: out.Snapshot}
		}
		return out, nil
	case StateFailedRetryable:
		if r.Held && r.ResponseStatus != nil { // outcome unknown: the stored answer, until an operator decides
			out.Kind = Replay
			out.Snapshot = r.snapshot()
			out.Failure = &Failure{Code: deref(r.ErrorCode), Detail: deref(r.ErrorDetail), Retryable: true,
				Snapshot: out.Snapshot, Hold: true}
			return out, nil
		}
	case StateProcessing:
		if !r.LeaseExpired {
			out.Kind = InProgress
			out.RetryAfter = retryAfter(time.Duration(r.LeaseRemainingMs)*time.Millisecond, r.LeaseHeld)
			return out, nil
		}
	}
	// failed_retryable, or processing with an expired lease: take it over.
	lease, err := s.takeover(ctx, s.db, r.ID, r.Version, p.Actor, s.cfg.Owner)
	if err != nil {
		return nil, err
	}
	if lease == nil {
		return nil, errRaced
	}
	// A retry of a failed attempt must check downstream first, unless an operator vouched that
	// the attempt left nothing outside (ReleaseForRetry).
	failed := r.State == StateFailedRetryable
	full := p.lease(r.ID, lease.Token, lease.Attempt, !failed, failed && !r.RetryCleared, lease.NotFoundAt)
	out.Kind, out.State, out.Lease = Acquired, StateProcessing, full
	return out, nil
}

// sameIntent compares fingerprints, recomputing the stored one when it was made by another
// canonicalizer version (the stored request is canonical JSON with the ignored fields already
// dropped, so this is exact; only the declared fields' normalisation needs the spec).
func sameIntent(r existingRow, in *Intent, spec IntentSpec) bool {
	if r.FingerprintVersion == in.Version {
		return r.Fingerprint == in.Fingerprint
	}
	again, err := Canonicalize([]byte(r.Request), IntentSpec{CurrencyField: spec.CurrencyField})
	return err == nil && again.Fingerprint == in.Fingerprint
}

func (r existingRow) snapshot() *Snapshot {
	if r.ResponseStatus == nil {
		return nil
	}
	snap := &Snapshot{Status: *r.ResponseStatus, Body: r.ResponseBody, ResourceID: deref(r.ResourceID)}
	if len(r.ResponseHeaders) > 0 {
		_ = json.Unmarshal(r.ResponseHeaders, &snap.Headers)
	}
	return snap
}

// retryAfter tells a caller when to come back. A live holder usually finishes long before its
// lease would lapse, so the hint is capped at MaxRetryAfter; a parked key (no holder: waiting out
// a quarantine or a lookup backoff) answers the real remaining time.
func retryAfter(remaining time.Duration, held bool) time.Duration {
	if held && remaining > MaxRetryAfter {
		return MaxRetryAfter
	}
	if remaining < time.Second {
		return time.Second
	}
	return remaining.Round(time.Second)
}

// MaxRetryAfter caps the retry hint while another attempt holds the key.
const MaxRetryAfter = 5 * time.Second

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (s *Store) event(ctx context.Context, db *gorm.DB, keyID int64, kind, actor, detail string) {
	if err := db.WithContext(ctx).Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, ?, ?, ?)`,
		keyID, kind, actor, s.traceDetail(ctx, detail)).Error; err != nil {
		s.cfg.Logger.Warn("key event not recorded", "key_id", keyID, "kind", kind, "err", err)
	}
}
