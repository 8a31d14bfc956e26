package claim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/idemops/idemops/errs"
	"gorm.io/gorm"
)

// ErrGuardConflict: a guarded update matched no row — the row's version, state or extra guard
// (say balance >= amount) no longer holds. The second seed's schemes 2 and 3: zero rows is an
// answer to read, never a success to ignore.
var ErrGuardConflict = errs.New(errs.Conflict, "guarded update matched no row")

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

// identRe is what a table or column name in a typed guarded update may be: these names come
// from code, never from requests, and the check keeps a typo from becoming SQL.
var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// GuardConflict is the error a typed guarded update returns when it matched no row. It wraps
// ErrGuardConflict and says what the row holds now, read in the same transaction right after
// the zero-row UPDATE, so the caller can tell "already there" from "not yet" from "gone".
type GuardConflict struct {
	Table string
	// Missing: no row has that id at all.
	Missing bool
	// State is the row's current state (Transition) and Version its current version
	// (VersionedUpdate); Extra is false when the row was in the expected state or version,
	// so only the extra guard (say balance >= amount) failed.
	State   string
	Version int64
	Extra   bool
}

func (e *GuardConflict) Error() string {
	switch {
	case e.Missing:
		return fmt.Sprintf("guarded update %s: no such row: %s", e.Table, ErrGuardConflict)
	case e.Extra:
		return fmt.Sprintf("guarded update %s: extra guard failed: %s", e.Table, ErrGuardConflict)
	case e.State != "":
		return fmt.Sprintf("guarded update %s: row is %s: %s", e.Table, e.State, ErrGuardConflict)
	}
	return fmt.Sprintf("guarded update %s: row is at version %d: %s", e.Table, e.Version, ErrGuardConflict)
}

func (e *GuardConflict) Unwrap() error { return ErrGuardConflict }

// Transition moves one row of a domain table from one state to another with a single
//
//	UPDATE <Table> SET <StateColumn> = To [, Set…] WHERE <IDColumn> = ID AND <StateColumn> = From [AND Extra]
//
// (the second seed's scheme 3: the state is the precondition, so a duplicate and a reordered
// event both find zero rows). S is the domain's own state type. On zero rows Apply returns a
// *GuardConflict holding the row's current state.
type Transition[S ~string] struct {
	Table string
	// IDColumn defaults to "id", StateColumn to "status".
	IDColumn, StateColumn string
	ID                    any
	From, To              S
	// Set holds further columns to change in the same UPDATE (gorm.Expr for expressions).
	Set map[string]any
	// Extra is an optional further guard with placeholders, e.g. "amount_minor = ?".
	Extra     string
	ExtraArgs []any
}

// Apply runs the transition on tx (the caller's transaction).
func (t Transition[S]) Apply(ctx context.Context, tx *gorm.DB) error {
	idCol, stCol := cmp.Or(t.IDColumn, "id"), cmp.Or(t.StateColumn, "status")
	if err := checkIdents(t.Table, idCol, stCol); err != nil {
		return err
	}
	if t.From == "" || t.To == "" || t.ID == nil {
		return fmt.Errorf("transition %s: ID, From and To are required", t.Table)
	}
	set := map[string]any{stCol: string(t.To)}
	for k, v := range t.Set {
		set[k] = v
	}
	u := GuardedUpdate{Table: t.Table, Guards: map[string]any{idCol: t.ID, stCol: string(t.From)}, Set: set,
		Extra: t.Extra, ExtraArgs: t.ExtraArgs}
	// The read after zero rows takes the row's lock: under READ COMMITTED the UPDATE may have
	// skipped a row that a concurrent transaction moved into From and committed just after, so
	// a read showing From means "try again", not a conflict. Under the lock the second UPDATE
	// sees what the read saw; a third round is never needed unless the caller runs outside a
	// transaction.
	for range guardRounds {
		err := u.Apply(ctx, tx)
		if !errors.Is(err, ErrGuardConflict) {
			return err
		}
		cur, err := readLocked[string](ctx, tx, t.Table, idCol, stCol, t.ID)
		if err != nil {
			return fmt.Errorf("transition %s: %w", t.Table, err)
		}
		switch {
		case len(cur) == 0:
			return &GuardConflict{Table: t.Table, Missing: true}
		case cur[0] != string(t.From):
			return &GuardConflict{Table: t.Table, State: cur[0]}
		case t.Extra == "":
			continue // moved into From concurrently: the transition applies now
		}
		if err := u.Apply(ctx, tx); !errors.Is(err, ErrGuardConflict) {
			return err
		}
		return &GuardConflict{Table: t.Table, State: cur[0], Extra: true}
	}
	return fmt.Errorf("transition %s: the row kept changing: %w", t.Table, ErrGuardConflict)
}

// readLocked reads col of the row whose idCol is id, taking the row's lock: the read after a
// guarded update matched zero rows (see Transition for why it must lock).
func readLocked[T any](ctx context.Context, tx *gorm.DB, table, idCol, col string, id any) ([]T, error) {
	var cur []T
	if err := tx.WithContext(ctx).Raw(fmt.Sprintf(`SELECT %s FROM %s WHERE %s = ? FOR UPDATE`, col, table, idCol), id).
		Scan(&cur).Error; err != nil {
		return nil, fmt.Errorf("read after zero rows: %w", err)
	}
	return cur, nil
}

// guardRounds bounds the update-read rounds of a typed guarded update.
const guardRounds = 3

// VersionedUpdate changes one row only at the version the caller read, and bumps it:
//
//	UPDATE <Table> SET <Set…>, version = version + 1 WHERE <IDColumn> = ID AND version = Version [AND Extra]
//
// (the second seed's scheme 2, optimistic locking). For money, Extra carries the overdraft
// guard, e.g. Extra "balance >= ?" with the amount, so concurrency never turns into overdraft.
// On zero rows Apply returns a *GuardConflict holding the row's current version.
type VersionedUpdate struct {
	Table string
	// IDColumn defaults to "id", VersionColumn to "version".
	IDColumn, VersionColumn string
	ID                      any
	Version                 int64
	Set                     map[string]any
	Extra                   string
	ExtraArgs               []any
}

// Apply runs the update on tx (the caller's transaction).
func (u VersionedUpdate) Apply(ctx context.Context, tx *gorm.DB) error {
	idCol, vCol := cmp.Or(u.IDColumn, "id"), cmp.Or(u.VersionColumn, "version")
	if err := checkIdents(u.Table, idCol, vCol); err != nil {
		return err
	}
	if u.ID == nil || len(u.Set) == 0 {
		return fmt.Errorf("versioned update %s: ID and Set are required", u.Table)
	}
	g := GuardedUpdate{Table: u.Table, Guards: map[string]any{idCol: u.ID, vCol: u.Version}, Set: u.Set,
		Bump: vCol, Extra: u.Extra, ExtraArgs: u.ExtraArgs}
	err := g.Apply(ctx, tx)
	if !errors.Is(err, ErrGuardConflict) {
		return err
	}
	// As in Transition: the read locks the row, so "still at Version" is final — the extra
	// guard failed — once a second UPDATE under the lock matches nothing either.
	cur, err := readLocked[int64](ctx, tx, u.Table, idCol, vCol, u.ID)
	if err != nil {
		return fmt.Errorf("versioned update %s: %w", u.Table, err)
	}
	switch {
	case len(cur) == 0:
		return &GuardConflict{Table: u.Table, Missing: true}
	case cur[0] != u.Version:
		return &GuardConflict{Table: u.Table, Version: cur[0]}
	}
	if err := g.Apply(ctx, tx); !errors.Is(err, ErrGuardConflict) {
		return err
	}
	return &GuardConflict{Table: u.Table, Version: cur[0], Extra: true}
}

func checkIdents(names ...string) error {
	for _, n := range names {
		if !identRe.MatchString(n) {
			return fmt.Errorf("guarded update: %q is not a plain lower-case SQL name", n)
		}
	}
	return nil
}
