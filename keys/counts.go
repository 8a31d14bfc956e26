package keys

import (
	"context"
	"fmt"
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
// (operation, state order; at most 500 rows). The window keeps the count off a whole-table scan:
// an index-only scan of the listing index, which carries tenant, operation and state (migration
// 00130), serves it; its cost follows the window's volume (docs/SCALING.md).
func CountByState(ctx context.Context, db *gorm.DB, scope Scope, window time.Duration) ([]StateCount, error) {
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	var rows []StateCount
	if err := db.WithContext(ctx).Raw(`SELECT operation, state, count(*) AS n FROM idempotency_keys
		WHERE `+cond+` AND created_at > now() - ? * interval '1 second'
		GROUP BY operation, state ORDER BY operation, state LIMIT ?`, append(args, window.Seconds(), maxStateCounts)...).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count keys by state: %w", err)
	}
	return rows, nil
}

// CountInState counts the keys in scope in state st, of any age: processing is served by the
// partial reclaim index, the other states by the state index.
func CountInState(ctx context.Context, db *gorm.DB, scope Scope, st claim.State) (int64, error) {
	return count(ctx, db, scope, "state = ?", st)
}

// CountNeedsAttention counts the keys in scope flagged for an operator (the partial index
// idempotency_keys_attention_idx, in listing order: the search's attention=1 reads it too).
func CountNeedsAttention(ctx context.Context, db *gorm.DB, scope Scope) (int64, error) {
	return count(ctx, db, scope, "needs_attention")
}

// CountUnresolved counts the keys in scope whose outcome outside is unknown and that wait to be
// resolved (claim.UnresolvedSQL): retention keeps them until they are. Served by the partial index
// idempotency_keys_unresolved_idx.
func CountUnresolved(ctx context.Context, db *gorm.DB, scope Scope) (int64, error) {
	cond, args, none := scope.SQL()
	if none {
		return 0, nil
	}
	var n int64
	if err := db.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys k WHERE `+cond+` AND `+claim.UnresolvedSQL, args...).
		Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count unresolved keys: %w", err)
	}
	return n, nil
}

// CountExpiredLeases counts the keys in scope that are processing with an expired lease — the
// backlog the daemon's reclaim takes over — counting at most upTo of them when upTo > 0 (the
// daemon's gauge is capped so a large backlog costs a bounded read). Served by the partial
// index idempotency_keys_reclaim_idx.
func CountExpiredLeases(ctx context.Context, db *gorm.DB, scope Scope, upTo int) (int64, error) {
	cond, args, none := scope.SQL()
	if none {
		return 0, nil
	}
	sql := `SELECT 1 FROM idempotency_keys WHERE ` + cond + ` AND state = ` + claim.StateProcessing.SQL() + ` AND lease_expires_at < now()`
	if upTo > 0 {
		sql += ` LIMIT ?`
		args = append(args, upTo)
	}
	var n int64
	if err := db.WithContext(ctx).Raw(`SELECT count(*) FROM (`+sql+`) b`, args...).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count expired leases: %w", err)
	}
	return n, nil
}

func count(ctx context.Context, db *gorm.DB, scope Scope, where string, a ...any) (int64, error) {
	cond, args, none := scope.SQL()
	if none {
		return 0, nil
	}
	var n int64
	if err := db.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys WHERE `+cond+` AND `+where, append(args, a...)...).
		Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count keys (%s): %w", where, err)
	}
	return n, nil
}

// MinuteCount is how many keys were created in one minute.
type MinuteCount struct {
	Minute time.Time
	N      int64
}

// ClaimsPerMinute counts the keys in scope created in each minute of the last hour, oldest
// first (at most 61 rows; an index-only scan of the listing index serves it).
func ClaimsPerMinute(ctx context.Context, db *gorm.DB, scope Scope) ([]MinuteCount, error) {
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	var rows []MinuteCount
	if err := db.WithContext(ctx).Raw(`SELECT date_trunc('minute', created_at) AS minute, count(*) AS n
		FROM idempotency_keys WHERE `+cond+` AND created_at > now() - interval '1 hour'
		GROUP BY 1 ORDER BY 1`, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("claims per minute: %w", err)
	}
	return rows, nil
}
