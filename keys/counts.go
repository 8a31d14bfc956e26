package keys

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// StateCount is how many keys of one operation are in one state.
type StateCount struct {
	Operation string
	State     claim.State
	N         int64
}

// maxStateCounts bounds CountByState's rows (operations × states).
const maxStateCounts = 500

// CountByState counts the keys in scope created in the last window, per operation and state
// (operation, state order; at most 500 rows). Its cost does not grow with the day's volume: the
// minutes that have settled are summed from key_counts (at most ~24 hour rows and ~120 minute
// rows per operation and state, folded by idemops_fold_key_counts, migration 00137, which it
// runs first), and only the minutes not folded yet — the last five or so — and the part of the
// window's first minute after its start are counted from the listing index. The counts are exact
// as of the read (docs/SCALING.md says what they miss: a key deleted less than a day after it was
// created, a change in a transaction open for over an hour).
func CountByState(ctx context.Context, db *gorm.DB, scope Scope, window time.Duration) ([]StateCount, error) {
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	if err := FoldCounts(ctx, db); err != nil {
		return nil, err
	}
	bnd, err := readBounds(ctx, db, window)
	if err != nil {
		return nil, err
	}
	bcond, bargs := bucketScope(scope)
	q, qargs := foldedCountsSQL(bnd, false, "k.operation, k.state", "c.operation, c.state", cond, args, bcond, bargs)
	var rows []StateCount
	if err := db.WithContext(ctx).Raw(`SELECT operation, state, sum(n)::bigint AS n FROM (`+q+`) x
		GROUP BY operation, state ORDER BY operation, state LIMIT ?`, append(qargs, maxStateCounts)...).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count keys by state: %w", err)
	}
	return rows, nil
}

// FoldCounts brings key_counts up to date (idemops_fold_key_counts, migration 00137): it counts
// the minutes settled since the last fold and counts again the settled minutes whose keys changed
// since. Its cost follows what happened since the last fold, not the day's volume (the first
// fold, or one after a day without, counts the last 25 hours once). The dashboard runs it before
// each read; a fold already running in another session is not waited for.
func FoldCounts(ctx context.Context, db *gorm.DB) error {
	var folded bool
	if err := db.WithContext(ctx).Raw(`SELECT idemops_fold_key_counts()`).Scan(&folded).Error; err != nil {
		return fmt.Errorf("fold key counts: %w", err)
	}
	return nil
}

// RefoldCounts makes the next fold count the last 25 hours again from the keys. key_counts is
// derived: a fold sees changes, not deletions, so whoever deletes keys younger than a day in
// bulk — a tenant moved to another cell (on both cells), a purge under a floor below one day —
// calls it afterwards. The next dashboard read pays for the recount once (a read of the day's
// listing index, as every read did before key_counts).
func RefoldCounts(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).Exec(`UPDATE key_count_folds SET settled_until = 'epoch'`).Error; err != nil {
		return fmt.Errorf("refold key counts: %w", err)
	}
	return nil
}

// bucketScope is the scope as a condition on key_counts' tenant column: every tenant's sum
// ('*') for a reader of every tenant, its tenants' rows otherwise.
func bucketScope(scope Scope) (string, []any) {
	if scope.All {
		return "c.tenant = '*'", nil
	}
	return "c.tenant IN ?", []any{scope.Tenants}
}

// foldBounds split a window into what key_counts holds and what is read from the keys:
// (S, MS) and [ST, now) from the keys, [MS, HS) and [HE, ST) from minute rows, [HS, HE) from
// hour rows.
type foldBounds struct{ S, MS, HS, HE, ST time.Time }

// readBounds reads how far key_counts goes and lays the last window out on it. The bucket rows
// read afterwards may come from a later fold than the bounds: a fold only ever moves settled_until
// on and counts its minutes again, and never drops a bucket younger than 25 hours, so every bucket
// inside these bounds is still there, as recent as the statement that reads it.
func readBounds(ctx context.Context, db *gorm.DB, window time.Duration) (foldBounds, error) {
	var f struct{ Now, CoveredFrom, SettledUntil time.Time }
	if err := db.WithContext(ctx).Raw(`SELECT now() AS now, covered_from, settled_until FROM key_count_folds`).Scan(&f).Error; err != nil {
		return foldBounds{}, fmt.Errorf("read key count bounds: %w", err)
	}
	var b foldBounds
	b.S = f.Now.Add(-window)
	b.ST = later(f.SettledUntil, b.S)
	b.MS = earlier(ceil(later(b.S, f.CoveredFrom), time.Minute), b.ST)
	b.HS = earlier(ceil(b.MS, time.Hour), b.ST)
	b.HE = later(b.ST.Truncate(time.Hour), b.HS)
	return b, nil
}

// ceil rounds t up to a multiple of d (minutes and hours: UTC's, which Truncate keeps to).
func ceil(t time.Time, d time.Duration) time.Time {
	if f := t.Truncate(d); f.Before(t) {
		return f.Add(d)
	}
	return t
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// foldedCountsSQL counts the keys created in the window b lays out, grouped by keyCols (of the
// keys, alias k) and bucketCols (the same, of key_counts, alias c): the union of the keys created
// after its start and before the first folded minute in it (the start's partial minute; all of
// it when nothing is folded there), key_counts' minute and hour rows, and the keys created from
// settled_until on (not folded yet). Each part yields keyCols/bucketCols and n. perMinute reads minute rows only
// (grouped by minute, no hour row may stand for its minutes).
func foldedCountsSQL(b foldBounds, perMinute bool, keyCols, bucketCols, cond string, args []any, bcond string, bargs []any) (string, []any) {
	var q strings.Builder
	var out []any
	part := func(sql string, a ...any) {
		if q.Len() > 0 {
			q.WriteString("\nUNION ALL\n")
		}
		q.WriteString(sql)
		out = append(out, a...)
	}
	if b.S.Before(b.MS) {
		part(`SELECT `+keyCols+`, count(*) AS n FROM idempotency_keys k
    WHERE `+cond+` AND k.created_at > `+tsSQL(b.S)+` AND k.created_at < `+tsSQL(b.MS)+` GROUP BY `+keyCols, args...)
	}
	part(`SELECT `+keyCols+`, count(*) AS n FROM idempotency_keys k
    WHERE `+cond+` AND k.created_at >= `+tsSQL(b.ST)+` AND k.created_at > `+tsSQL(b.S)+` GROUP BY `+keyCols, args...)
	type rng struct {
		width    string
		from, to time.Time
	}
	ranges := []rng{{"minute", b.MS, b.HS}, {"hour", b.HS, b.HE}, {"minute", b.HE, b.ST}}
	if perMinute {
		ranges = []rng{{"minute", b.MS, b.ST}}
	}
	for _, r := range ranges {
		if !r.from.Before(r.to) {
			continue
		}
		part(`SELECT `+bucketCols+`, sum(c.n) AS n FROM key_counts c
    WHERE `+bcond+` AND c.width = '`+r.width+`' AND c.bucket >= `+tsSQL(r.from)+` AND c.bucket < `+tsSQL(r.to)+` GROUP BY `+bucketCols, bargs...)
	}
	return q.String(), out
}

// tsSQL is t as a timestamptz literal. The bounds are written into the statement rather than
// passed as parameters: a prepared statement's generic plan, which it gets after a few runs,
// would plan every range for a third of the table.
func tsSQL(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'::timestamptz"
}

// Backlog is a set of keys of any age that the dashboard counts: InState(st), NeedsAttention,
// Unresolved, ExpiredLeases. Its condition is written into the statement (see CountInState).
type Backlog struct {
	name, where string
}

// InState is the keys in state st: processing is served by the partial reclaim index,
// failed_retryable by idempotency_keys_retryable_tenant_idx (00139) for some tenants and the
// state index for all, the other states by the state index. The state is written into the
// statement, not passed as a parameter: a generic plan, which a prepared statement gets after a
// few runs, cannot use an index partial on a state it does not know (172 ms instead of 0.3 ms at
// 1M keys for three tenants' processing keys).
func InState(st claim.State) Backlog {
	if !st.Valid() {
		return Backlog{name: fmt.Sprintf("no state %q", st)}
	}
	return Backlog{name: string(st), where: "k.state = " + st.SQL()}
}

var (
	// NeedsAttention is the keys flagged for an operator (the partial index
	// idempotency_keys_attention_idx, in listing order: the search's attention=1 reads it too).
	NeedsAttention = Backlog{name: "needing attention", where: "k.needs_attention"}
	// Unresolved is the keys whose outcome outside is unknown and that wait to be resolved
	// (claim.UnresolvedSQL): retention keeps them until they are. Served by the partial index
	// idempotency_keys_unresolved_idx.
	Unresolved = Backlog{name: "unresolved", where: claim.UnresolvedSQL}
	// ExpiredLeases is the processing keys whose lease expired — the backlog the daemon's
	// reclaim takes over. Served by the partial index idempotency_keys_reclaim_idx.
	ExpiredLeases = Backlog{name: "expired leases", where: "k.state = " + claim.StateProcessing.SQL() + " AND k.lease_expires_at < now()"}
)

// CountCapped counts the keys of b in scope, reading at most upTo+1 of them when upTo > 0: n is
// exact when capped is false; when capped, there are more than upTo and n is upTo. A backlog's
// exact count costs a read of its whole index range (650k entries at 10M keys for every tenant);
// a capped one costs at most upTo+1 entries whatever the backlog. upTo 0 counts them all.
func CountCapped(ctx context.Context, db *gorm.DB, scope Scope, b Backlog, upTo int) (n int64, capped bool, err error) {
	if b.where == "" {
		return 0, false, fmt.Errorf("count keys: %s", b.name)
	}
	cond, args, none := scope.SQL()
	if none {
		return 0, false, nil
	}
	q, args := cappedCountSQL(cond, args, b, upTo)
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&n).Error; err != nil {
		return 0, false, fmt.Errorf("count keys %s: %w", b.name, err)
	}
	if upTo > 0 && n > int64(upTo) {
		return int64(upTo), true, nil
	}
	return n, false, nil
}

// cappedCountSQL is CountCapped's statement: a count of the first upTo+1 rows (all with 0).
func cappedCountSQL(cond string, args []any, b Backlog, upTo int) (string, []any) {
	rows := `SELECT 1 FROM idempotency_keys k WHERE ` + cond + ` AND ` + b.where
	if upTo > 0 {
		rows += ` LIMIT ?`
		args = append(slices.Clip(args), upTo+1)
	}
	return `SELECT count(*) FROM (` + rows + `) b`, args
}

// CountInState counts the keys in scope in state st, of any age (InState).
func CountInState(ctx context.Context, db *gorm.DB, scope Scope, st claim.State) (int64, error) {
	n, _, err := CountCapped(ctx, db, scope, InState(st), 0)
	return n, err
}

// CountNeedsAttention counts the keys in scope flagged for an operator (NeedsAttention).
func CountNeedsAttention(ctx context.Context, db *gorm.DB, scope Scope) (int64, error) {
	n, _, err := CountCapped(ctx, db, scope, NeedsAttention, 0)
	return n, err
}

// CountUnresolved counts the keys in scope whose outcome outside is unknown (Unresolved).
func CountUnresolved(ctx context.Context, db *gorm.DB, scope Scope) (int64, error) {
	n, _, err := CountCapped(ctx, db, scope, Unresolved, 0)
	return n, err
}

// CountExpiredLeases counts the keys in scope that are processing with an expired lease
// (ExpiredLeases), at most upTo of them when upTo > 0 (the daemon's gauge is capped so a large
// backlog costs a bounded read).
func CountExpiredLeases(ctx context.Context, db *gorm.DB, scope Scope, upTo int) (int64, error) {
	n, _, err := CountCapped(ctx, db, scope, ExpiredLeases, upTo)
	return n, err
}

// MinuteCount is how many keys were created in one minute.
type MinuteCount struct {
	Minute time.Time
	N      int64
}

// ClaimsPerMinute counts the keys in scope created in each minute of the last hour, oldest
// first (at most 61 rows): the folded minutes from key_counts' minute rows, the rest from the
// listing index (as CountByState, which runs the fold; the dashboard calls that first).
func ClaimsPerMinute(ctx context.Context, db *gorm.DB, scope Scope) ([]MinuteCount, error) {
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	bnd, err := readBounds(ctx, db, time.Hour)
	if err != nil {
		return nil, err
	}
	bcond, bargs := bucketScope(scope)
	q, qargs := foldedCountsSQL(bnd, true, "date_trunc('minute', k.created_at, 'UTC')", "c.bucket", cond, args, bcond, bargs)
	var rows []MinuteCount
	if err := db.WithContext(ctx).Raw(`SELECT minute, sum(n)::bigint AS n FROM (`+q+`) x (minute, n)
		GROUP BY minute ORDER BY minute`, qargs...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("claims per minute: %w", err)
	}
	return rows, nil
}
