package claim

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"gorm.io/gorm"
)

// takenOver is what a takeover's compare-and-set returns.
type takenOver struct {
	ID         int64
	Token      string
	Attempt    int
	NotFoundAt *time.Time
}

// takeoverSQL moves a key whose earlier attempt ended (failed_retryable) or stalled (expired
// lease) to a new holder. The version compare makes concurrent takers race safely: exactly one
// update matches.
const takeoverSQL = `
WITH u AS (
    UPDATE idempotency_keys
    SET state = 'processing', lease_owner = ?, lease_token = ?, lease_expires_at = now() + ? * interval '1 millisecond',
        attempts = attempts + 1, version = version + 1, updated_at = now()
    WHERE id = ? AND version = ?
      AND (state = 'failed_retryable' OR (state = 'processing' AND lease_expires_at < now()))
    RETURNING id, lease_token::text AS token, attempts AS attempt, not_found_at, state
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail)
    SELECT id, 'taken_over', ?, jsonb_build_object('attempt', attempt, 'owner', ?::text) || ?::jsonb FROM u
)
SELECT id, token, attempt, not_found_at FROM u`

func (s *Store) takeover(ctx context.Context, db *gorm.DB, id, version int64, actor, owner string) (*Lease, error) {
	var rows []takenOver
	token := newToken()
	err := db.WithContext(ctx).Raw(takeoverSQL, owner, token, s.cfg.LeaseTTL.Milliseconds(), id, version,
		actor, owner, s.traceJSON(ctx)).Scan(&rows).Error
	if ConnLost(err) {
		// The takeover may have committed: it did if the row now carries our token.
		rerr := s.reread(ctx, func(ctx context.Context) error {
			rows = rows[:0]
			return s.db.WithContext(ctx).Raw(`SELECT id, lease_token::text AS token, attempts AS attempt, not_found_at
				FROM idempotency_keys WHERE id = ? AND lease_token = ?::uuid`, id, token).Scan(&rows).Error
		})
		if rerr != nil {
			return nil, fmt.Errorf("takeover key %d: outcome unknown after a lost connection (%v): %w", id, err, rerr)
		}
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("takeover key %d: %w", id, Fenced(err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := rows[0]
	return &Lease{KeyID: r.ID, Token: r.Token, Attempt: r.Attempt, NotFoundAt: r.NotFoundAt, Actor: actor}, nil
}

// takeoverBatchSQL takes over up to n processing keys whose lease expired, oldest expiry first.
// The partial index idempotency_keys_reclaim_idx serves the scan; SKIP LOCKED lets replicas split
// the work without waiting on each other; each key gets its own fresh token.
const takeoverBatchSQL = `
WITH picked AS (
    SELECT id FROM idempotency_keys
    WHERE state = 'processing' AND lease_expires_at < now()
      -- a fenced tenant's keys (a move under way, migration 00135) wait for the tenant's new cell
      AND NOT EXISTS (SELECT FROM cell_fences f WHERE f.tenant = idempotency_keys.tenant)
    ORDER BY lease_expires_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE idempotency_keys k
    SET lease_owner = ?, lease_token = gen_random_uuid(), lease_expires_at = now() + ? * interval '1 millisecond',
        attempts = k.attempts + 1, version = k.version + 1, updated_at = now()
    FROM picked WHERE k.id = picked.id
    RETURNING k.id, k.tenant, k.operation, k.key, k.key_digest, k.downstream_key, k.request::text AS request,
              k.amount_minor, k.currency, k.lease_token::text AS token, k.attempts AS attempt, k.not_found_at
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail)
    SELECT id, 'taken_over', ?, jsonb_build_object('attempt', attempt, 'owner', ?::text) || ?::jsonb FROM u
)
SELECT * FROM u ORDER BY id`

type batchRow struct {
	ID            int64
	Tenant        string
	Operation     string
	Key           string
	KeyDigest     string
	DownstreamKey string
	Request       string
	AmountMinor   *int64
	Currency      *string
	Token         string
	Attempt       int
	NotFoundAt    *time.Time
}

// TakeoverExpired takes over up to limit processing keys whose lease has expired, on behalf of
// actor (the daemon's reclaimer). Each returned lease has Takeover set: its holder must ask
// downstream before anything else (Drive does).
func (s *Store) TakeoverExpired(ctx context.Context, limit int, actor string) ([]*Lease, error) {
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("takeover batch size %d out of range 1..10000", limit)
	}
	var rows []batchRow
	err := s.db.WithContext(ctx).Raw(takeoverBatchSQL, limit, s.cfg.Owner, s.cfg.LeaseTTL.Milliseconds(),
		actor, s.cfg.Owner, s.traceJSON(ctx)).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("takeover expired leases: %w", err)
	}
	out := make([]*Lease, len(rows))
	for i, r := range rows {
		out[i] = &Lease{KeyID: r.ID, Tenant: r.Tenant, Operation: r.Operation, Key: r.Key, Digest: r.KeyDigest,
			DownstreamKey: r.DownstreamKey, Intent: []byte(r.Request), Amount: r.AmountMinor, Currency: deref(r.Currency),
			Token: r.Token, Attempt: r.Attempt, Takeover: true, NotFoundAt: r.NotFoundAt, Actor: actor}
	}
	return out, nil
}

// Takeover takes one key over by id on behalf of actor (an operator's replay, a reconciliation
// fix): allowed for failed_retryable keys and processing keys whose lease expired; otherwise
// ErrNotReplayable. The returned lease must check downstream first.
func (s *Store) Takeover(ctx context.Context, keyID int64, actor string) (*Lease, error) {
	k, err := s.Get(ctx, keyID)
	if err != nil {
		return nil, err
	}
	return s.takeoverKey(ctx, k, actor)
}

// takeoverKey takes k over at the version it was read at.
func (s *Store) takeoverKey(ctx context.Context, k *Key, actor string) (*Lease, error) {
	if !k.Replayable() {
		return nil, fmt.Errorf("takeover key %d in state %s: %w", k.ID, k.State, ErrNotReplayable)
	}
	l, err := s.takeover(ctx, s.db, k.ID, k.Version, actor, s.cfg.Owner)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("takeover key %d: %w", k.ID, ErrLeaseLost)
	}
	l.Tenant, l.Operation, l.Key, l.Digest = k.Tenant, k.Operation, k.Key, k.KeyDigest
	l.DownstreamKey, l.Intent, l.Amount, l.Currency = k.DownstreamKey, json.RawMessage(k.Request), k.AmountMinor, deref(k.Currency)
	l.Takeover, l.Retry = k.State == StateProcessing, k.State == StateFailedRetryable && !k.RetryCleared
	return l, nil
}

// holderWrite runs a compare-and-set on the lease token with its event in the same statement,
// and turns "no row matched" into ErrLeaseLost.
//
// Holder writes match on id and lease token only, never on state as well: a token is set only
// while the key is processing (CHECK idempotency_keys_lease_consistent), so the state adds
// nothing, and "state = 'processing' AND id = $n" let the planner pick the console's
// (state, created_at, id) index, walking every dead 'processing' entry the key's earlier
// versions left there — a Complete that took tens of milliseconds on a busy table instead of
// one primary-key probe.
func (s *Store) holderWrite(ctx context.Context, tx *gorm.DB, l *Lease, what, setSQL string, args []any, kind, detail string) error {
	return s.holderWriteAnswer(ctx, tx, l, what, setSQL, args, nil, kind, detail)
}

// firstAttempt says whether the lease is the first attempt of a key its own claim inserted: no
// answer can be stored for the key yet (an answer is stored only by the write that ends a lease,
// and every later lease is a takeover with attempt 2 or more), so its answer needs a plain
// insert, not the upsert that overwrites an earlier one.
func (l *Lease) firstAttempt() bool { return l.Attempt == 1 && !l.MustCheckDownstream() }

// storedAnswer is the answer a holder write stores with the key (in key_responses, in the same
// statement); clear drops the key's reference to its earlier one instead.
type storedAnswer struct {
	clear   bool
	status  int
	headers string
	body    []byte
}

// holderWriteAnswer is holderWrite that also stores (or clears) the key's answer. It and
// holderWriteOnce keep their frames small, cold paths in functions of their own: they sit under
// the deepest point of a completion (its statement's encoding in pgx), and a request's goroutine
// whose stack overflows there copies every frame below it.
func (s *Store) holderWriteAnswer(ctx context.Context, tx *gorm.DB, l *Lease, what, setSQL string, args []any, ans *storedAnswer, kind, detail string) error {
	if ans != nil && !ans.clear {
		s.ensureResponseDays(ctx)
	}
	if tx != nil {
		return s.holderWriteOnce(ctx, tx, l, what, setSQL, args, ans, kind, detail)
	}
	// Our own statement: when its connection is lost, re-read the key to learn whether it
	// committed; run the compare-and-set again only while the token is still ours (then it
	// did not). Bounded: each round waits out at most the reconnect window.
	for round := 0; ; round++ {
		err := s.holderWriteOnce(ctx, s.db, l, what, setSQL, args, ans, kind, detail)
		if !ConnLost(err) || round == 2 {
			return err
		}
		if again, err := s.holderAfterLost(ctx, l, what, kind, args, err); !again {
			return err
		}
	}
}

// holderAfterLost re-reads a key whose holder write lost its connection: done (nil) when the
// write took effect, an error when the outcome is unknown or the lease was lost, again when the
// token is still ours (the write did not commit).
//
//go:noinline
func (s *Store) holderAfterLost(ctx context.Context, l *Lease, what, kind string, args []any, lost error) (again bool, err error) {
	applied, held, rerr := s.holderOutcome(ctx, l, holderEndStates(kind, args)...)
	switch {
	case rerr != nil:
		return false, fmt.Errorf("%s %s: outcome unknown after a lost connection (%v): %w", what, l.Digest, lost, rerr)
	case applied:
		return false, nil
	case !held:
		return false, fmt.Errorf("%s %s: %w", what, l.Digest, ErrLeaseLost)
	}
	return true, nil
}

// holderEndStates is the state a holder write leaves the key in when it clears the token, by its
// event kind: how a re-read after a lost connection recognizes that the write took effect.
func holderEndStates(kind string, args []any) []State {
	switch kind {
	case "completed", "recovered_from_downstream":
		return []State{StateCompleted}
	case "failed":
		if st, ok := args[0].(string); ok {
			return []State{State(st)}
		}
	case "released":
		return []State{StateFailedRetryable}
	case "downstream_not_found", "lookup_failed":
		return []State{StateProcessing}
	}
	return nil // the token stays (mark executing): still ours means run it again
}

func (s *Store) holderWriteOnce(ctx context.Context, tx *gorm.DB, l *Lease, what, setSQL string, args []any, ans *storedAnswer, kind, detail string) error {
	shape := holderShape{set: setSQL, nargs: len(args), completed: kind == "completed"}
	all := make([]any, 0, len(args)+8)
	all = append(all, args...)
	detail = s.traceDetail(ctx, detail)
	if shape.completed {
		all = append(all, l.Actor, detail)
	}
	all = append(all, l.KeyID, l.Token)
	switch {
	case ans == nil:
	case ans.clear:
		shape.answer = answerClear
	default:
		shape.answer = answerInsert
		if !l.firstAttempt() {
			shape.answer = answerUpsert
		}
		all = append(all, ans.status, ans.headers, ans.body)
	}
	if !shape.completed {
		all = append(all, kind, l.Actor, detail)
	}
	// Exec, not QueryRow: the statement's row count (its answer insert's, else its final
	// SELECT's) says whether the compare-and-set matched, and database/sql starts a goroutine
	// per Rows under a cancellable context, which every completion would pay for nothing.
	res, err := conn(tx).ExecContext(ctx, shape.sql(), all...)
	if err != nil {
		return holderError(what, l, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return holderError(what, l, err)
	}
	if n == 0 {
		return holderError(what, l, ErrLeaseLost)
	}
	return nil
}

//go:noinline
func holderError(what string, l *Lease, err error) error {
	return fmt.Errorf("%s %s: %w", what, l.Digest, Fenced(err))
}

// answerMode is what a holder write does with the key's stored answer.
type answerMode int8

const (
	answerNone   answerMode = iota
	answerClear             // drop the key's reference to its earlier answer
	answerInsert            // store the first answer of a key its own claim inserted
	answerUpsert            // store an answer, overwriting one stored earlier the same day
)

// holderShape is everything a holder write's statement text depends on; its parameters follow
// in the order holderWriteOnce appends them.
type holderShape struct {
	set       string
	nargs     int
	answer    answerMode
	completed bool
}

// holderSQLs caches each shape's statement text: the set is finite (the call sites' constant
// SET clauses times the answer modes), and rebuilding it cost every completion a few kilobytes
// of string copies.
var holderSQLs sync.Map // holderShape → string

func (h holderShape) sql() string {
	if q, ok := holderSQLs.Load(h); ok {
		return q.(string)
	}
	n := h.nargs
	p := func() string { n++; return `$` + strconv.Itoa(n) }
	set := h.set + `, version = version + 1, updated_at = now()`
	switch h.answer {
	case answerClear:
		set += `, response_day = NULL`
	case answerInsert, answerUpsert:
		set += `, response_day = (now() AT TIME ZONE 'UTC')::date`
	}
	if h.completed {
		// The happy path's completion is recorded on the row itself (completed_*, read back
		// through key_history; migration 00059), at the id its key_events row would have had.
		set += `, completed_event_id = nextval('key_events_id_seq'), completed_by = ` + p() + `, completed_detail = ` + p()
	}
	q := `WITH u AS (UPDATE idempotency_keys SET ` + set + `
    WHERE id = ` + p() + ` AND lease_token = ` + p() + ` RETURNING id, response_day)`
	var answer string
	if h.answer == answerInsert || h.answer == answerUpsert {
		// The answer goes to its day's partition of key_responses in the same statement; a key
		// that stored one earlier the same day (a held failure, then a completion) overwrites it.
		answer = `INSERT INTO key_responses (key_id, day, status, headers, body)
    SELECT id, response_day, ` + p() + `::integer, ` + p() + `::jsonb, ` + p() + `::bytea FROM u`
		if h.answer == answerUpsert {
			answer += `
    ON CONFLICT (key_id, day) DO UPDATE SET status = EXCLUDED.status, headers = EXCLUDED.headers, body = EXCLUDED.body`
		}
	}
	if !h.completed {
		q += `, ev AS (INSERT INTO key_events (key_id, kind, actor, detail) SELECT id, ` + p() + `, ` + p() + `, ` + p() + ` FROM u)`
	}
	if answer != "" {
		// The answer's insert is the statement itself: it writes one row for each row u updated
		// (inserted or, upserting, updated), so its row count is the compare-and-set's, and no
		// row goes back to the client.
		q += `
` + answer
	} else {
		q += ` SELECT id FROM u`
	}
	holderSQLs.Store(h, q)
	return q
}

// Renew extends the lease by the TTL. ErrLeaseLost means someone else holds the key now: stop.
func (s *Store) Renew(ctx context.Context, l *Lease) error {
	res, err := conn(s.db).ExecContext(ctx, `UPDATE idempotency_keys SET lease_expires_at = now() + $1 * interval '1 millisecond'
		WHERE id = $2 AND lease_token = $3`, s.cfg.LeaseTTL.Milliseconds(), l.KeyID, l.Token)
	if err != nil {
		return fmt.Errorf("renew %s: %w", l.Digest, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("renew %s: %w", l.Digest, ErrLeaseLost)
	}
	return nil
}

// Complete records the snapshot and moves the key to completed, in tx (the caller's transaction,
// so business rows and the key commit together; nil uses the store's handle).
func (s *Store) Complete(ctx context.Context, tx *gorm.DB, l *Lease, snap *Snapshot) error {
	return s.complete(ctx, tx, l, snap, "completed", "")
}

func (s *Store) complete(ctx context.Context, tx *gorm.DB, l *Lease, snap *Snapshot, kind, detail string) error {
	if err := s.checkSnapshot("complete", l, snap); err != nil {
		return err
	}
	snap = snap.filtered()
	if detail == "" {
		detail = completedDetail(snap, l.Attempt)
	}
	return s.holderWriteAnswer(ctx, tx, l, "complete",
		`state = 'completed', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
		 resource_id = NULLIF($1, ''),
		 error_code = NULL, error_detail = NULL, not_found_at = NULL, lookup_failures = 0, needs_attention = false,
		 held = false, retry_cleared = false, completed_at = now(), response_expires_at = now() + $2 * interval '1 second', expires_at = now() + $3 * interval '1 second',
		 channel_account = COALESCE(NULLIF($4, ''), channel_account)`,
		[]any{snap.ResourceID, s.keepResponseSecs, s.keepKeySecs, l.ChannelAccount},
		&storedAnswer{status: snap.Status, headers: string(snap.headersJSON()), body: snap.Body},
		kind, detail)
}

// checkSnapshot refuses a missing or oversized answer.
//
//go:noinline
func (s *Store) checkSnapshot(what string, l *Lease, snap *Snapshot) error {
	if snap == nil {
		return fmt.Errorf("%s %s: nil snapshot", what, l.Digest)
	}
	if len(snap.Body) > s.cfg.MaxSnapshotBytes {
		return fmt.Errorf("%s %s: body of %d bytes: %w", what, l.Digest, len(snap.Body), ErrSnapshotTooLarge)
	}
	return nil
}

//go:noinline
func completedDetail(snap *Snapshot, attempt int) string {
	return detailJSON("status", snap.Status, "resource_id", snap.ResourceID, "attempt", attempt)
}

// Fail records a failed attempt in tx (nil: the store's handle). Final failures (with their
// snapshot, if any) are replayed to later requests; retryable ones are claimed again by the next
// attempt with the same intent.
func (s *Store) Fail(ctx context.Context, tx *gorm.DB, l *Lease, f *Failure) error {
	state := StateFailedFinal
	if f.Retryable {
		state = StateFailedRetryable
	}
	snap := &Snapshot{}
	if f.Snapshot != nil {
		if err := s.checkSnapshot("fail", l, f.Snapshot); err != nil {
			return err
		}
		snap = f.Snapshot.filtered()
	}
	ans := &storedAnswer{clear: true}
	if f.Snapshot != nil {
		ans = &storedAnswer{status: snap.Status, headers: string(snap.headersJSON()), body: snap.Body}
	}
	hold := f.Hold && f.Retryable && f.Snapshot != nil
	return s.holderWriteAnswer(ctx, tx, l, "fail",
		`state = $1, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
		 error_code = $2, error_detail = $3,
		 resource_id = COALESCE(NULLIF($4, ''), resource_id), not_found_at = NULL,
		 completed_at = CASE WHEN $5 = 'failed_final' THEN now() END,
		 response_expires_at = now() + $6 * interval '1 second', expires_at = now() + $7 * interval '1 second',
		 held = $8, needs_attention = needs_attention OR $8, retry_cleared = false,
		 channel_account = COALESCE(NULLIF($9, ''), channel_account)`,
		[]any{string(state), f.Code, f.Detail, snap.ResourceID, string(state),
			s.keepResponseSecs, s.keepKeySecs, hold, l.ChannelAccount}, ans,
		"failed", detailJSON("state", state, "code", f.Code, "detail", f.Detail, "attempt", l.Attempt, "held", hold))
}

// Release gives the key up after a failure before any externally visible change. A first claim
// leaves no record at all (the next attempt starts afresh); a later attempt returns the key to
// failed_retryable, since an earlier attempt may have reached downstream.
func (s *Store) Release(ctx context.Context, l *Lease, reason string) error {
	for retries := 0; !l.MustCheckDownstream() && l.Attempt == 1; {
		// The key's history and recorded answers go with it in the same statement (no foreign keys).
		var id int64
		err := conn(s.db).QueryRowContext(ctx, `WITH d AS (
			DELETE FROM idempotency_keys WHERE id = $1 AND lease_token = $2 RETURNING id
		), ev AS (DELETE FROM key_events WHERE key_id IN (SELECT id FROM d))
		, ans AS (DELETE FROM key_answers WHERE key_id IN (SELECT id FROM d))
		SELECT id FROM d`, l.KeyID, l.Token).Scan(&id)
		if ConnLost(err) {
			// Gone means the delete committed; our token still there means it did not.
			var r *leaseRow
			if rerr := s.reread(ctx, func(ctx context.Context) error {
				var e error
				r, e = s.readLease(ctx, l.KeyID)
				return e
			}); rerr != nil {
				return fmt.Errorf("release %s: outcome unknown after a lost connection (%v): %w", l.Digest, err, rerr)
			}
			if r == nil {
				return nil
			}
			if r.Token == nil || *r.Token != l.Token {
				return fmt.Errorf("release %s: %w", l.Digest, ErrLeaseLost)
			}
			if retries++; retries > 2 {
				return fmt.Errorf("release %s: %w", l.Digest, err)
			}
			continue // the delete did not commit: the key is still ours
		}
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("release %s: %w", l.Digest, ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("release %s: %w", l.Digest, err)
		}
		return nil
	}
	return s.holderWrite(ctx, nil, l, "release",
		`state = 'failed_retryable', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
		 error_code = 'released', error_detail = $1, retry_cleared = false`, []any{reason},
		"released", detailJSON("reason", reason, "attempt", l.Attempt))
}

// RecordDownstreamNotFound records a downstream not-found and parks the key (processing, no
// holder) until the quarantine has passed since the first one, so that the next taker looks
// again. It returns how long until that second look.
func (s *Store) RecordDownstreamNotFound(ctx context.Context, l *Lease) (time.Duration, error) {
	first := time.Now()
	if l.NotFoundAt != nil {
		first = *l.NotFoundAt
	}
	wait := time.Until(s.QuarantineEnds(first))
	if wait < time.Second {
		wait = time.Second
	}
	err := s.holderWrite(ctx, nil, l, "record not-found",
		`lease_owner = NULL, lease_token = NULL, not_found_at = COALESCE(not_found_at, now()),
		 lease_expires_at = COALESCE(not_found_at, now()) + $1 * interval '1 millisecond'`,
		[]any{s.cfg.Quarantine.Milliseconds()},
		"downstream_not_found", detailJSON("quarantine_s", s.cfg.Quarantine.Seconds(), "attempt", l.Attempt))
	return wait, err
}

// RecordLookupError records that downstream could not answer and parks the key until a backoff
// has passed; after LookupAttempts failures in a row the key is flagged "needs attention".
func (s *Store) RecordLookupError(ctx context.Context, l *Lease, lookupErr error) (time.Duration, error) {
	var failures []int
	if err := s.db.WithContext(ctx).Raw(`SELECT lookup_failures FROM idempotency_keys WHERE id = ?`, l.KeyID).
		Scan(&failures).Error; err != nil {
		return 0, fmt.Errorf("record lookup error %s: %w", l.Digest, err)
	}
	n := 1
	if len(failures) == 1 {
		n = failures[0] + 1
	}
	backoff := s.cfg.LookupBackoff << min(n-1, 6)
	backoff = min(backoff, 5*time.Minute)
	attention := n >= s.cfg.LookupAttempts
	err := s.holderWrite(ctx, nil, l, "record lookup error",
		`lease_owner = NULL, lease_token = NULL, lookup_failures = lookup_failures + 1,
		 needs_attention = needs_attention OR $1, lease_expires_at = now() + $2 * interval '1 millisecond'`,
		[]any{attention, backoff.Milliseconds()},
		"lookup_failed", detailJSON("error", lookupErr.Error(), "failures", n, "needs_attention", attention))
	return backoff, err
}

// markExecuting records that this attempt is about to execute: the not-found proof is used up,
// so a crash during execution forces the next taker to prove absence afresh.
func (s *Store) markExecuting(ctx context.Context, l *Lease) error {
	return s.holderWrite(ctx, nil, l, "mark executing", `not_found_at = NULL`, nil,
		"executing", detailJSON("attempt", l.Attempt))
}
