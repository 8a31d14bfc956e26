package claim

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// ErrGuardConflict: a guarded update matched no row — the row's version, state or extra guard
// (say balance >= amount) no longer holds. The second seed's schemes 2 and 3: zero rows is an
// answer to read, never a success to ignore.
var ErrGuardConflict = errors.New("guarded update matched no row")

// GuardedUpdate is one `UPDATE table SET … WHERE <guards> [AND <extra>]` on a domain table.
// Guards are equality conditions (id, status = ?, version = ?), ANDed; Extra is an optional
// condition with placeholders such as "balance >= ?". Set holds the new values (gorm.Expr for
// expressions like "balance - ?"); Bump names a column to increment by one (a version).
type GuardedUpdate struct {
	Table     string
	Guards    map[string]any
	Set       map[string]any
	Bump      string
	Extra     string
	ExtraArgs []any
}

// Apply runs u on tx (the caller's transaction, so the update commits with its other writes).
// It returns ErrGuardConflict when no row matched, and an error when more than one did (the
// guards must name one row).
func (u GuardedUpdate) Apply(ctx context.Context, tx *gorm.DB) error {
	if u.Table == "" || len(u.Guards) == 0 || (len(u.Set) == 0 && u.Bump == "") {
		return fmt.Errorf("guarded update: table, guards and a change are required")
	}
	set := make(map[string]any, len(u.Set)+1)
	for k, v := range u.Set {
		set[k] = v
	}
	if u.Bump != "" {
		set[u.Bump] = gorm.Expr(tx.Statement.Quote(u.Bump) + " + 1")
	}
	q := tx.WithContext(ctx).Table(u.Table).Where(u.Guards)
	if u.Extra != "" {
		q = q.Where(u.Extra, u.ExtraArgs...)
	}
	res := q.Updates(set)
	if res.Error != nil {
		return fmt.Errorf("guarded update %s: %w", u.Table, res.Error)
	}
	switch res.RowsAffected {
	case 0:
		return fmt.Errorf("guarded update %s: %w", u.Table, ErrGuardConflict)
	case 1:
		return nil
	default:
		return fmt.Errorf("guarded update %s: guards matched %d rows", u.Table, res.RowsAffected)
	}
}
