package keys

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// The keys a bulk replay takes: those an operator picked by id, or everything a search
// matches, newest first, read whole (claim.Key) within the operator's scope.

// MatchingIDs collects the ids of up to limit+1 keys of the search f in scope, newest first
// (one more than limit says more match).
func MatchingIDs(ctx context.Context, db *gorm.DB, scope Scope, f KeyFilter, limit int) ([]int64, error) {
	f.After, f.Limit = nil, SearchMaxLimit
	var ids []int64
	for page := 0; page <= limit/SearchMaxLimit+1 && len(ids) <= limit; page++ {
		rows, next, err := SearchKeys(ctx, db, scope, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == nil {
			break
		}
		f.After = next
	}
	if len(ids) > limit+1 {
		ids = ids[:limit+1]
	}
	return ids, nil
}

// Matching collects up to limit+1 keys of the search f in scope, newest first, with their full
// rows; a key purged between the search and the read is left out.
func Matching(ctx context.Context, db *gorm.DB, scope Scope, f KeyFilter, limit int) ([]claim.Key, error) {
	ids, err := MatchingIDs(ctx, db, scope, f, limit)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []claim.Key
	if err := db.WithContext(ctx).Raw(`SELECT `+claim.KeyColumns+` FROM idempotency_keys WHERE id IN ?`, ids).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read matching keys: %w", err)
	}
	pos := make(map[int64]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	slot := make([]*claim.Key, len(ids))
	for i := range rows {
		slot[pos[rows[i].ID]] = &rows[i]
	}
	ordered := make([]claim.Key, 0, len(rows))
	for _, k := range slot {
		if k != nil {
			ordered = append(ordered, *k)
		}
	}
	return ordered, nil
}

// Selected reads the keys of ids that scope sees, newest first; ids outside it or gone are
// left out.
func Selected(ctx context.Context, db *gorm.DB, scope Scope, ids []int64) ([]claim.Key, error) {
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	var rows []claim.Key
	if err := db.WithContext(ctx).Raw(`SELECT `+claim.KeyColumns+` FROM idempotency_keys WHERE id IN ? AND `+cond+
		` ORDER BY created_at DESC, id DESC`, append([]any{ids}, args...)...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read selected keys: %w", err)
	}
	return rows, nil
}
