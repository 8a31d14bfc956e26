package keys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// Retention's writes to idempotency_keys. They live here because every write to the keys goes
// through claim or this package; the retention package decides when and how much, and calls
// these.
//
// A key's retention runs in two stages: once response_expires_at has passed, its response is
// dropped and it stays as a tombstone (fingerprint, state, resource id) that answers a late retry
// with Expired; once expires_at has passed, the row goes (with its key_events). Never touched
// by either stage: processing keys, keys on legal hold, unresolved keys (claim.UnresolvedSQL: their
// outcome outside is unknown, and a late retry of a purged one would execute without asking),
// and keys an open reconciliation finding refers to (the discrepancies table, when that
// migration is present).

// ownSpareSQL is the part of the spare predicate that reads only the key's own row.
const ownSpareSQL = `k.state <> 'processing' AND NOT k.legal_hold AND NOT ` + claim.UnresolvedSQL

// ExpiryRules say which finished keys may lose their response or their row.
type ExpiryRules struct {
	// Policies override the periods stamped when a key ended: a key is deleted only once both its
	// expires_at and its policy's keep-key period (from when it ended) have passed.
	Policies []claim.ExpiryPolicy
	// Floor: no key that ended less than Floor ago is deleted, whatever its stamps say.
	Floor time.Duration
	// Operation limits the pass to one operation ("" : all).
	Operation string
}

// ExpiryCursor is a position in the index a pass walks (its timestamp column, then id). The zero
// cursor is the start.
type ExpiryCursor struct {
	At time.Time
	ID int64
}

// ExpiryCount is how many keys of one operation and state a pass changed.
type ExpiryCount struct {
	Operation string
	State     claim.State
	N         int64
}

// ExpiryBatch is what one batch of a pass did. Done: the pass found fewer rows than its limit, so
// nothing eligible is left after Next.
type ExpiryBatch struct {
	Counts []ExpiryCount
	N      int64
	Next   ExpiryCursor
	Done   bool
}

// keyBase is when a key ended: retention periods count from it.
const keyBase = `COALESCE(k.completed_at, k.updated_at)`

// sqlArgs numbers a statement's parameters as its text is built.
type sqlArgs []any

func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// keepSQL is the policy period (seconds) of key k, or NULL when no policy covers it: its
// operation's own policy beats '*'. A CASE over the few policies costs next to nothing per row,
// where a lookup subquery per scanned row would cost more than the delete itself.
func keepSQL(a *sqlArgs, policies []claim.ExpiryPolicy, period func(claim.ExpiryPolicy) time.Duration) string {
	if len(policies) == 0 {
		return "NULL::bigint"
	}
	var b strings.Builder
	b.WriteString("(CASE")
	for _, own := range []bool{true, false} {
		for _, p := range policies {
			if (p.Operation != "*") != own {
				continue
			}
			secs := strconv.FormatInt(int64(period(p)/time.Second), 10)
			if own {
				fmt.Fprintf(&b, " WHEN k.state = %s AND k.operation = %s THEN %s", a.add(string(p.State)), a.add(p.Operation), secs)
			} else {
				fmt.Fprintf(&b, " WHEN k.state = %s THEN %s", a.add(string(p.State)), secs)
			}
		}
	}
	b.WriteString(" ELSE NULL::bigint END)")
	return b.String()
}

func keepKey(p claim.ExpiryPolicy) time.Duration      { return p.KeepKey }
func keepResponse(p claim.ExpiryPolicy) time.Duration { return p.KeepResponse }

// spareSQL is the predicate of keys no retention pass may touch: processing keys, keys on legal
// hold, unresolved keys (claim.UnresolvedSQL), keys an open reconciliation finding refers to — that
// clause only when the discrepancies table exists (reconciliation's migration), so that
// retention works with or without it — and, with an operation filter, every other operation. own is the part that reads only the key's
// row, which a batch's write checks again on the row it changes.
//
// A batch's statements check the open findings by a probe of discrepancies_open_key_idx per key
// (OFFSET 0 keeps the NOT EXISTS a subquery): as an anti join the planner, which takes a batch's
// freshly expired keys for a handful, read every open finding once per key — 186 open findings
// made a delete batch of 10,000 keys take 1.0 s instead of 0.12 s (a purge of a day, 1M keys).
// CountDue reads many keys, where an anti join over the open findings (read once) is the plan.
func spareSQL(ctx context.Context, db *gorm.DB, a *sqlArgs, operation string) (all, own string, err error) {
	return spareSQLFor(ctx, db, a, operation, ` OFFSET 0`)
}

func spareSQLFor(ctx context.Context, db *gorm.DB, a *sqlArgs, operation, probe string) (all, own string, err error) {
	var exists bool
	if err := conn(db).QueryRowContext(ctx, `SELECT to_regclass('public.discrepancies') IS NOT NULL`).Scan(&exists); err != nil {
		return "", "", fmt.Errorf("look for discrepancies: %w", err)
	}
	own = ownSpareSQL
	if operation != "" {
		own += ` AND k.operation = ` + a.add(operation)
	}
	all = own
	if exists {
		all += ` AND NOT EXISTS (SELECT 1 FROM discrepancies d WHERE d.key_id = k.id AND d.state = 'open'` + probe + `)`
	}
	return all, own, nil
}

// floorSQL: the key ended at least Floor ago.
func (r ExpiryRules) floorSQL() string {
	return keyBase + ` < now() - ` + r.floorInterval()
}

func (r ExpiryRules) floorInterval() string {
	return `interval '` + strconv.FormatInt(int64(r.Floor/time.Second), 10) + ` seconds'`
}

// DeleteExpiredKeys deletes up to limit keys whose period is over, in (expires_at, id) order
// after cursor, served by idempotency_keys_expires_idx. A key goes only when its stamp and its
// policy agree (a policy saved after the key ended may keep it longer than its stamp says; the
// stamp phase brings stamps in line with shorter ones) and it ended at least Floor ago. The batch
// is read without row locks (locking each row first cost more than deleting it); a key that a
// concurrent writer changed in between — claimed again, put on hold, completed anew — is passed
// over (a later run meets it again if it is still due), a key being written right now is waited
// for (up to the transaction's lock timeout) and then passed over if its writer changed it.
// key_events, and what refers to a deleted key, go in the same statement. Run it inside a
// transaction to give it a timeout.
func DeleteExpiredKeys(ctx context.Context, db *gorm.DB, rules ExpiryRules, after ExpiryCursor, limit int) (ExpiryBatch, error) {
	var a sqlArgs
	spare, own, err := spareSQL(ctx, db, &a, rules.Operation)
	if err != nil {
		return ExpiryBatch{}, err
	}
	due := `k.expires_at < now() AND ` + own + ` AND ` + rules.floorSQL() + `
      AND COALESCE(` + keyBase + ` + ` + keepKeySQL(&a, rules) + ` * interval '1 second' < now(), true)`
	at := a.add(after.At)
	q := `WITH picked AS (
    SELECT k.id, k.ctid AS tid, k.expires_at AS at FROM idempotency_keys k
    WHERE k.expires_at >= ` + at + ` AND (k.expires_at, k.id) > (` + at + `, ` + a.add(after.ID) + `)
      AND ` + due + ` AND ` + spare + `
    ORDER BY k.expires_at, k.id LIMIT ` + a.add(limit) + `
), gone AS (
    -- By the rows' physical addresses (a TID scan), not through the primary key once more. A row
    -- updated since it was picked has moved to a new address and is passed over; the conditions
    -- run again on every row deleted all the same, so that no change slips between pick and delete.
    DELETE FROM idempotency_keys k WHERE k.ctid = ANY (ARRAY (SELECT tid FROM picked)) AND ` + due + `
    RETURNING k.id, k.operation, k.state, k.response_day
), gone_responses AS (
    -- An answer a drop kept (a key held past its response period, now released) goes with its key.
    DELETE FROM key_responses r USING gone g WHERE r.key_id = g.id AND r.day = g.response_day
), gone_events AS (
    -- A key's history goes with it, in the same statement (a nested loop over key_events'
    -- primary key: cheaper here than one index scan of an id array).
    DELETE FROM key_events e USING gone g WHERE e.key_id = g.id
), gone_answers AS (
    DELETE FROM key_answers a USING gone g WHERE a.key_id = g.id
), gone_items AS (
    -- What refers to a key, set-based here rather than by a foreign key's trigger per row:
    -- replay requests and bulk items go with their key, outbox rows forget it. Joins, so that
    -- the planner may read a small table once rather than probe its index once per key.
    DELETE FROM replay_bulk_items i USING gone g WHERE i.key_id = g.id
), gone_requests AS (
    DELETE FROM replay_requests r USING gone g WHERE r.key_id = g.id
), unlinked AS (
    UPDATE outbox o SET key_id = NULL FROM gone g WHERE o.key_id = g.id
)`
	return runExpiryBatch(ctx, db, "delete expired keys", q, a, limit)
}

func keepKeySQL(a *sqlArgs, r ExpiryRules) string      { return keepSQL(a, r.Policies, keepKey) }
func keepResponseSQL(a *sqlArgs, r ExpiryRules) string { return keepSQL(a, r.Policies, keepResponse) }

// ResponseDrop is what DropExpiredResponses did to one day of stored answers.
type ResponseDrop struct {
	// Dropped: the day's partition is detached from key_responses (its table goes after commit,
	// DropDetachedResponses). False: the day is not due yet (more of its answers
	// are kept than a drop may move, or one belongs to a key in flight); nothing changed.
	Dropped bool
	// Counts and N are the keys whose answer went, per operation and state; Moved, the answers
	// kept (moved to today's partition).
	Counts []ExpiryCount
	N      int64
	Moved  int64
}

// DropExpiredResponses drops one day of stored answers (a key_responses partition) once every
// answer in it is due — its response period over by stamp and by policy — except at most maxKeep
// that a legal hold, an open finding or a longer period keeps: those are moved to today's
// partition first (the key row follows them), and the day goes with one DROP, where a tombstone
// per key rewrote every key row. The key rows stay: a late retry is answered Expired, never
// executed again. Each key whose answer went shows a response_expired event by actor, one
// key_response_drops row for the day (key_history); a retryable key's answer goes with a stored
// event instead, and its row forgets the day. A day holding the answer of a key in flight
// (processing) waits for a later run. Run it inside a transaction (the purge's batch): the drop
// takes the parent table's exclusive lock only at the end, after a short re-check of the few
// kept keys that may have changed meanwhile (held, taken over, an open finding), for the few
// milliseconds until commit. rules.Operation must be empty: a day holds every operation's answers.
func DropExpiredResponses(ctx context.Context, db *gorm.DB, rules ExpiryRules, day time.Time, actor string, maxKeep int) (ResponseDrop, error) {
	var out ResponseDrop
	if rules.Operation != "" {
		return out, fmt.Errorf("drop expired responses: a day holds every operation's answers; no operation filter (%q)", rules.Operation)
	}
	day = utcDay(day)
	part := claim.ResponsePartition(day)
	var a sqlArgs
	spare, _, err := spareSQL(ctx, db, &a, "")
	if err != nil {
		return out, err
	}
	due := `(k.response_expires_at < now() AND ` + spare + `
      AND COALESCE(` + keyBase + ` + ` + keepResponseSQL(&a, rules) + ` * interval '1 second' < now(), true))`
	inDay := part + ` r JOIN idempotency_keys k ON k.id = r.key_id AND k.response_day = r.day`
	if fast, err := dropWithoutReading(ctx, db, rules, day, part); err != nil || fast != nil {
		if err != nil {
			return ResponseDrop{}, err
		}
		out = *fast
		return out, lockAndDrop(ctx, db, day, part, actor)
	}
	// The count reads the key row of every answer of the day once; the open findings (a
	// subquery per row inside the aggregate would cost more than the rest) are counted apart,
	// as kept, through their own small table.
	var c sqlArgs
	dueOwn := `(k.response_expires_at < now() AND ` + ownSpareSQL + `
      AND COALESCE(` + keyBase + ` + ` + keepResponseSQL(&c, rules) + ` * interval '1 second' < now(), true))`
	rows, err := conn(db).QueryContext(ctx, `SELECT k.operation, k.state, count(*) FILTER (WHERE `+dueOwn+`),
		count(*) FILTER (WHERE NOT `+dueOwn+`), count(*) FILTER (WHERE k.state = 'processing')
		FROM `+inDay+` GROUP BY 1, 2`, c...)
	if err != nil {
		return out, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	var kept, inFlight, retryable int64
	for rows.Next() {
		var c ExpiryCount
		var state string
		var k, p int64
		if err := rows.Scan(&c.Operation, &state, &c.N, &k, &p); err != nil {
			rows.Close()
			return out, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
		}
		c.State = claim.State(state)
		kept, inFlight = kept+k, inFlight+p
		if c.State == claim.StateFailedRetryable {
			retryable += c.N
		}
		if c.N > 0 {
			out.Counts = append(out.Counts, c)
			out.N += c.N
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	if strings.Contains(spare, "discrepancies") {
		var open int64
		if err := conn(db).QueryRowContext(ctx, `SELECT count(*) FROM discrepancies x JOIN idempotency_keys k ON k.id = x.key_id
			WHERE x.state = 'open' AND k.response_day = $1::date`, day).Scan(&open); err != nil {
			return out, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
		}
		kept += open // counted as due above: the move below sorts them out, the counts stay near
	}
	if kept > int64(maxKeep) || inFlight > 0 {
		return ResponseDrop{}, nil
	}
	if kept+retryable > 0 {
		// The kept answers move to today's partition, their rows with them; a retryable key whose
		// answer goes records it in a stored event (its next answer would move its response_day).
		actorArg := a.add(actor)
		q := `WITH x AS (
    SELECT k.id, ` + due + ` AS due FROM ` + inDay + ` WHERE NOT ` + due + ` OR k.state = 'failed_retryable'
), mv AS (
    INSERT INTO key_responses (key_id, day, status, headers, body)
    SELECT r.key_id, (now() AT TIME ZONE 'UTC')::date, r.status, r.headers, r.body FROM ` + part + ` r
    WHERE r.key_id IN (SELECT id FROM x WHERE NOT due)
    ON CONFLICT (key_id, day) DO NOTHING
), up AS (
    UPDATE idempotency_keys k SET response_day = CASE WHEN x.due THEN NULL ELSE (now() AT TIME ZONE 'UTC')::date END
    FROM x WHERE k.id = x.id AND k.response_day = ` + a.add(day) + `::date
    RETURNING k.id, x.due
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail) SELECT id, 'response_expired', ` + actorArg + `, '{}' FROM up WHERE due
)
SELECT count(*) FILTER (WHERE NOT due) FROM up`
		if err := conn(db).QueryRowContext(ctx, q, a...).Scan(&out.Moved); err != nil {
			return ResponseDrop{}, fmt.Errorf("move kept responses of %s: %w", day.Format(time.DateOnly), err)
		}
	}
	if err := lockAndDrop(ctx, db, day, part, actor); err != nil {
		return ResponseDrop{}, err
	}
	out.Dropped = true
	return out, nil
}

// dropWithoutReading decides a day without reading its keys one by one, when it can: no policy
// keeps an answer of the day longer than the day plus its period (the stamp phase has brought
// every stamp in line), and the index on (response_day, response_expires_at) finds no stamp of
// the day still running; then the spared keys (held, in flight, an open finding) are found
// through their own small indexes. It answers nil, nil when the day needs the full reading
// (a policy still running for it, kept answers to move), and the drop's count (every answer of
// the day, counted off the partition's primary key) otherwise.
func dropWithoutReading(ctx context.Context, db *gorm.DB, rules ExpiryRules, day time.Time, part string) (*ResponseDrop, error) {
	for _, p := range rules.Policies {
		if day.AddDate(0, 0, 1).Add(p.KeepResponse).After(time.Now()) {
			return nil, nil
		}
	}
	var running bool
	err := conn(db).QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM idempotency_keys
		WHERE response_day = $1::date AND response_expires_at >= now())`, day).Scan(&running)
	if err != nil {
		return nil, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	if running {
		return nil, nil
	}
	changed, err := sparedOnDay(ctx, db, day)
	if err != nil || changed {
		return nil, err
	}
	var n int64
	if err := conn(db).QueryRowContext(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
		return nil, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	out := &ResponseDrop{Dropped: true, N: n}
	if n > 0 { // an empty day (made ahead, never written) is dropped without a count, as the full reading does
		out.Counts = []ExpiryCount{{Operation: "*", State: "", N: n}}
	}
	return out, nil
}

// sparedOnDay says whether a key whose answer is on day is spared by every retention pass (on
// legal hold, in flight, an open finding), each found through a small index.
func sparedOnDay(ctx context.Context, db *gorm.DB, day time.Time) (bool, error) {
	var findings bool
	if err := conn(db).QueryRowContext(ctx, `SELECT to_regclass('public.discrepancies') IS NOT NULL`).Scan(&findings); err != nil {
		return false, err
	}
	q := `SELECT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.legal_hold AND k.response_day = $1::date)
	    OR EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.state = 'processing' AND k.response_day = $1::date)
	    OR EXISTS (SELECT 1 FROM idempotency_keys k WHERE ` + claim.UnresolvedSQL + ` AND k.response_day = $1::date)`
	if findings {
		q += ` OR EXISTS (SELECT 1 FROM discrepancies x JOIN idempotency_keys k ON k.id = x.key_id
	        WHERE x.state = 'open' AND k.response_day = $1::date)`
	}
	var spared bool
	if err := conn(db).QueryRowContext(ctx, q, day).Scan(&spared); err != nil {
		return false, fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	return spared, nil
}

// lockAndDrop drops the day's partition. From the lock to commit nothing reads or writes stored
// answers: it re-checks the keys that may have become kept since the day was counted (held,
// taken over, an open finding), each through a small index, and gives up the day
// (errResponseDayChanged) if one did.
func lockAndDrop(ctx context.Context, db *gorm.DB, day time.Time, part, actor string) error {
	if _, err := conn(db).ExecContext(ctx, `LOCK TABLE key_responses IN ACCESS EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	changed, err := sparedOnDay(ctx, db, day)
	if err != nil {
		return err
	}
	if changed {
		return errResponseDayChanged
	}
	if _, err := conn(db).ExecContext(ctx, `INSERT INTO key_response_drops (day, actor) VALUES ($1, $2)`, day, actor); err != nil {
		return fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	// Detached, not dropped: dropping unlinks the partition's files at commit, tens of
	// milliseconds for a day of answers, all of it under the parent's exclusive lock that every
	// completion waits on. A detach is a catalog change; the table goes afterwards, outside the
	// lock (DropDetachedResponses).
	if _, err := conn(db).ExecContext(ctx, `ALTER TABLE key_responses DETACH PARTITION `+part); err != nil {
		return fmt.Errorf("drop responses of %s: %w", day.Format(time.DateOnly), err)
	}
	return nil
}

// DropDetachedResponses drops the day tables of key_responses that a committed drop detached
// (DropExpiredResponses) — or that a drop left behind when its process died between the commit
// and this call — up to 64 a call. Nothing reads a detached day: its keys forgot it in the
// transaction that detached it. Call it outside that transaction, after its commit.
func DropDetachedResponses(ctx context.Context, db *gorm.DB) error {
	var names []string
	if err := db.WithContext(ctx).Raw(`SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
		  AND c.relname ~ '^key_responses_[0-9]{8}$' ORDER BY c.relname LIMIT 64`).Scan(&names).Error; err != nil {
		return fmt.Errorf("find detached response days: %w", err)
	}
	for _, n := range names {
		if _, err := conn(db).ExecContext(ctx, `DROP TABLE IF EXISTS `+n); err != nil {
			return fmt.Errorf("drop detached response day %s: %w", n, err)
		}
	}
	return nil
}

// errResponseDayChanged: a key of the day became kept between the count and the drop; the
// caller rolls back (the moves too) and a later run tries the day again.
var errResponseDayChanged = errors.New("a key of the day changed while it was dropped")

// IsResponseDayChanged reports whether DropExpiredResponses stopped because a key changed under
// it (roll back; try the day again later).
func IsResponseDayChanged(err error) bool { return errors.Is(err, errResponseDayChanged) }

// TombstoneDayResponses drops, row by row, the stored answers of up to limit keys of one day
// whose response period is over (by stamp and by policy): the way a day that cannot be dropped
// yet (yesterday, today, or one holding too many kept answers) loses its due answers. Each key
// forgets its response_day and records a response_expired event by actor; the key stays, and a
// late retry is answered Expired. As in DeleteExpiredKeys, rows are picked without locks and
// every condition runs again on the row written. Done: fewer than limit were due.
func TombstoneDayResponses(ctx context.Context, db *gorm.DB, rules ExpiryRules, day time.Time, limit int, actor string) (ExpiryBatch, error) {
	if limit <= 0 {
		return ExpiryBatch{}, fmt.Errorf("tombstone expired responses: batch size %d must be positive", limit)
	}
	day = utcDay(day)
	var a sqlArgs
	spare, own, err := spareSQL(ctx, db, &a, rules.Operation)
	if err != nil {
		return ExpiryBatch{}, err
	}
	due := `k.response_expires_at < now() AND ` + own + `
      AND COALESCE(` + keyBase + ` + ` + keepResponseSQL(&a, rules) + ` * interval '1 second' < now(), true)`
	d := a.add(day)
	q := `WITH picked AS (
    SELECT k.id, k.ctid AS tid, k.response_expires_at AS at FROM ` + claim.ResponsePartition(day) + ` r
    JOIN idempotency_keys k ON k.id = r.key_id AND k.response_day = r.day
    WHERE ` + due + ` AND ` + spare + `
    LIMIT ` + a.add(limit) + `
), gone AS (
    UPDATE idempotency_keys k SET response_day = NULL
    WHERE k.ctid = ANY (ARRAY (SELECT tid FROM picked)) AND k.response_day = ` + d + `::date AND ` + due + `
    RETURNING k.id, k.operation, k.state
), dropped AS (
    DELETE FROM key_responses r USING gone g WHERE r.key_id = g.id AND r.day = ` + d + `::date
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail) SELECT id, 'response_expired', ` + a.add(actor) + `, '{}' FROM gone
)`
	return runExpiryBatch(ctx, db, "tombstone expired responses", q, a, limit)
}

// expiryBatchTail reports a batch: the last position it picked, and its counts per operation
// and state. No row at all means nothing was picked.
const expiryBatchTail = `, last AS (SELECT at, id FROM picked ORDER BY at DESC, id DESC LIMIT 1)
SELECT last.at, last.id, (SELECT count(*) FROM picked), c.operation, c.state, COALESCE(c.n, 0)
FROM last LEFT JOIN (SELECT operation, state, count(*) AS n FROM gone GROUP BY 1, 2) c ON true`

func runExpiryBatch(ctx context.Context, db *gorm.DB, what, q string, args []any, limit int) (ExpiryBatch, error) {
	if limit <= 0 {
		return ExpiryBatch{}, fmt.Errorf("%s: batch size %d must be positive", what, limit)
	}
	rows, err := conn(db).QueryContext(ctx, q+expiryBatchTail, args...)
	if err != nil {
		return ExpiryBatch{}, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var b ExpiryBatch
	var picked int64
	for rows.Next() {
		var op, state sql.NullString
		var n int64
		if err := rows.Scan(&b.Next.At, &b.Next.ID, &picked, &op, &state, &n); err != nil {
			return ExpiryBatch{}, fmt.Errorf("%s: %w", what, err)
		}
		if n > 0 {
			b.Counts = append(b.Counts, ExpiryCount{Operation: op.String, State: claim.State(state.String), N: n})
			b.N += n
		}
	}
	if err := rows.Err(); err != nil {
		return ExpiryBatch{}, fmt.Errorf("%s: %w", what, err)
	}
	// Fewer picked than limit: the index holds nothing more that is due. (A picked row that a
	// concurrent writer made no longer due is passed over; a later run meets it again if it is.)
	b.Done = picked < int64(limit)
	return b, nil
}

// StampBatch is what one batch of StampExpiry did.
type StampBatch struct {
	Scanned int64
	Stamped int64
	Next    ExpiryCursor
}

// StampExpiry brings the expiry columns of up to limit ended keys, in (updated_at, id) order
// after cursor (idempotency_keys_stamp_idx), in line with policies: claim stamps a key with its
// configured defaults when it ends, and a policy saved later changes what the key's periods are.
// A response deadline that has already passed never moves later (a tombstone stays a tombstone;
// a key already answered Expired is not replayed again). Keys without a policy keep their stamps.
// A key that changed since it was read (version) is left for the next batch, which meets it again
// at its new updated_at.
func StampExpiry(ctx context.Context, db *gorm.DB, policies []claim.ExpiryPolicy, after ExpiryCursor, limit int) (StampBatch, error) {
	if limit <= 0 {
		return StampBatch{}, fmt.Errorf("stamp expiry: batch size %d must be positive", limit)
	}
	var a sqlArgs
	r := ExpiryRules{Policies: policies}
	kr, kk := keepResponseSQL(&a, r), keepKeySQL(&a, r)
	at, id := a.add(after.At), a.add(after.ID)
	q := `WITH picked AS (
    SELECT k.id, k.updated_at, k.version,
        CASE WHEN ` + kr + ` IS NULL OR k.response_expires_at <= now() THEN k.response_expires_at
             ELSE ` + keyBase + ` + ` + kr + ` * interval '1 second' END AS response_expires_at,
        CASE WHEN ` + kk + ` IS NULL THEN k.expires_at ELSE ` + keyBase + ` + ` + kk + ` * interval '1 second' END AS expires_at
    FROM idempotency_keys k
    WHERE k.state <> 'processing' AND (k.updated_at, k.id) > (` + at + `, ` + id + `)
    ORDER BY k.updated_at, k.id LIMIT ` + a.add(limit) + `
), stamped AS (
    -- id = ANY (ARRAY …) makes the update reach its rows through the primary key rather than
    -- hash-join the whole table against the batch.
    UPDATE idempotency_keys k SET response_expires_at = c.response_expires_at, expires_at = c.expires_at
    FROM picked c
    WHERE k.id = ANY (ARRAY (SELECT id FROM picked)) AND k.id = c.id AND k.version = c.version AND k.state <> 'processing'
      AND (k.response_expires_at IS DISTINCT FROM c.response_expires_at OR k.expires_at IS DISTINCT FROM c.expires_at)
    RETURNING k.id
), last AS (SELECT updated_at, id FROM picked ORDER BY updated_at DESC, id DESC LIMIT 1)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM stamped),
       COALESCE((SELECT updated_at FROM last), ` + at + `), COALESCE((SELECT id FROM last), ` + id + `)`
	var b StampBatch
	if err := conn(db).QueryRowContext(ctx, q, a...).Scan(&b.Scanned, &b.Stamped, &b.Next.At, &b.Next.ID); err != nil {
		return StampBatch{}, fmt.Errorf("stamp expiry: %w", err)
	}
	return b, nil
}

// Expiry phases, as CountDue reports them.
const (
	PhaseDelete    = "delete"
	PhaseTombstone = "tombstone"
)

// DueCount is how many keys of one operation, state and creation day (UTC) a purge would delete
// or tombstone.
type DueCount struct {
	Phase     string
	Operation string
	State     claim.State
	Day       time.Time
	N         int64
}

// DueSample says how CountDue counted: every ended key (Fraction 1), or a sample of the table's
// pages whose counts were scaled up (Fraction < 1: the counts are an estimate).
type DueSample struct {
	// Fraction of the keys table's pages read (1: all; the counts are exact).
	Fraction float64
	// Rows is the keys table's size as the planner's statistics have it.
	Rows int64
}

// Estimated reports whether the counts are scaled up from a sample.
func (s DueSample) Estimated() bool { return s.Fraction < 1 }

// CountDue counts what a purge with rules would do now, changing nothing: keys it would delete,
// and keys it would only tombstone. It applies the policies as the purge's stamp phase would
// have stamped them, so its counts are what a complete run then does. Which keys are due depends
// on policies that may be saved after the keys ended, so no index narrows the read: it reads
// every ended key when the table holds at most exactUpTo rows (by its statistics), and otherwise
// a sample of the table's pages of about sampleRows rows (TABLESAMPLE SYSTEM, a fixed seed) whose
// counts it scales up — an estimate, labelled so in DueSample, whose cost does not grow with the
// table. exactUpTo ≤ 0 always counts exactly. Give it a statement timeout.
func CountDue(ctx context.Context, db *gorm.DB, rules ExpiryRules, exactUpTo, sampleRows int64) ([]DueCount, DueSample, error) {
	sample := DueSample{Fraction: 1}
	if exactUpTo > 0 {
		// reltuples is -1 before the first ANALYZE: then the pages say how big the table is.
		if err := conn(db).QueryRowContext(ctx, `SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint ELSE relpages::bigint * 50 END
			FROM pg_class WHERE oid = 'idempotency_keys'::regclass`).Scan(&sample.Rows); err != nil {
			return nil, sample, fmt.Errorf("count due keys: table size: %w", err)
		}
		if sample.Rows > exactUpTo {
			sample.Fraction = min(1, float64(max(sampleRows, 1))/float64(sample.Rows))
		}
	}
	// JIT compiled this one statement's expressions for seconds to save milliseconds. The counts
	// group up to every ended key: hashed, not sorted first (a sort of the due keys costs more
	// than the few hundred groups' own; the groups are sorted after).
	if _, err := conn(db).ExecContext(ctx, `SELECT set_config('jit', 'off', true), set_config('enable_sort', 'off', true)`); err != nil {
		return nil, sample, fmt.Errorf("count due keys: %w", err)
	}
	from := `idempotency_keys k`
	if sample.Estimated() {
		from += ` TABLESAMPLE SYSTEM (` + strconv.FormatFloat(100*sample.Fraction, 'f', 6, 64) + `) REPEATABLE (7)`
	}
	var a sqlArgs
	spare, _, err := spareSQLFor(ctx, db, &a, rules.Operation, "")
	if err != nil {
		return nil, sample, err
	}
	kr, kk := keepResponseSQL(&a, rules), keepKeySQL(&a, rules)
	// The answer's probe (a lookup in a partitioned table, pruned per row) comes last, for the
	// keys with an answer whose period is over: the cheap columns decide the rest (AND stops at
	// the first false). 200 → 97 ms for a 3% sample of 1M keys without stored answers.
	q := `WITH due AS (
    SELECT k.operation, k.state, (k.created_at AT TIME ZONE 'UTC')::date AS day,
        (CASE WHEN ` + kk + ` IS NULL THEN k.expires_at ELSE ` + keyBase + ` + ` + kk + ` * interval '1 second' END) < now()
            AND ` + rules.floorSQL() + ` AS del,
        k.response_day IS NOT NULL
            AND (CASE WHEN ` + kr + ` IS NULL THEN k.response_expires_at ELSE ` + keyBase + ` + ` + kr + ` * interval '1 second' END) < now()
            AND EXISTS (SELECT 1 FROM key_responses r WHERE r.key_id = k.id AND r.day = k.response_day) AS tomb
    FROM ` + from + `
    WHERE ` + spare + `
)
SELECT CASE WHEN del THEN 'delete' ELSE 'tombstone' END, operation, state, day, count(*)
FROM due WHERE del OR tomb GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`
	rows, err := conn(db).QueryContext(ctx, q, a...)
	if err != nil {
		return nil, sample, fmt.Errorf("count due keys: %w", err)
	}
	defer rows.Close()
	var out []DueCount
	for rows.Next() {
		var c DueCount
		var state string
		if err := rows.Scan(&c.Phase, &c.Operation, &state, &c.Day, &c.N); err != nil {
			return nil, sample, fmt.Errorf("count due keys: %w", err)
		}
		c.State = claim.State(state)
		if sample.Estimated() {
			c.N = int64(math.Round(float64(c.N) / sample.Fraction))
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, sample, fmt.Errorf("count due keys: %w", err)
	}
	return out, sample, nil
}

// MaxHoldReason bounds a legal-hold reason.
const MaxHoldReason = 500

// ErrInvalidHold: a legal-hold request without an operator actor or a reason.
var ErrInvalidHold = errs.New(errs.Invalid, "invalid legal hold request")

// SetLegalHold puts a key on legal hold (hold true) or lifts it, with a key event by actor
// (operator:NAME) carrying the reason. A key on hold is never tombstoned or purged. It reports
// whether anything changed (setting a hold twice records nothing). claim.ErrNotFound when there is no
// such key; an *errs.FieldError of ErrInvalidHold for a bad actor or reason.
func SetLegalHold(ctx context.Context, db *gorm.DB, keyID int64, hold bool, actor, reason string) (bool, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case !strings.HasPrefix(actor, "operator:") || len(actor) == len("operator:"):
		return false, errs.Fieldf("actor", "must be operator:NAME, got %q", actor).Of(ErrInvalidHold)
	case reason == "":
		return false, errs.Fieldf("reason", "must not be empty").Of(ErrInvalidHold)
	case len(reason) > MaxHoldReason:
		return false, errs.Fieldf("reason", "is %d characters long, at most %d allowed", len(reason), MaxHoldReason).Of(ErrInvalidHold)
	}
	kind := "legal_hold_lifted"
	if hold {
		kind = "legal_hold_set"
	}
	var exists, changed bool
	err := conn(db).QueryRowContext(ctx, `
WITH u AS (
    UPDATE idempotency_keys SET legal_hold = $1 WHERE id = $2 AND legal_hold <> $1 RETURNING id
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail) SELECT id, $3, $4, $5 FROM u
)
SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE id = $2), EXISTS (SELECT 1 FROM u)`,
		hold, keyID, kind, actor, reasonDetail(reason)).Scan(&exists, &changed)
	if err != nil {
		return false, fmt.Errorf("legal hold on key %d: %w", keyID, err)
	}
	if !exists {
		return false, fmt.Errorf("key %d: %w", keyID, claim.ErrNotFound)
	}
	return changed, nil
}

// conn is db's connection (a transaction's, inside one) for database/sql calls.
func conn(db *gorm.DB) gorm.ConnPool { return db.Statement.ConnPool }

func utcDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}
