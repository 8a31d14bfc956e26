package claim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/idemops/idemops/errs"
	"gorm.io/gorm"
)

// ErrNaturalKeyShape: a natural key made of a user and a product (or an amount). Two real
// purchases of the same thing, or of the same price, are legal; such a key would drop the
// second one (the second seed's pitfall 1). Use a client idempotency key instead.
var ErrNaturalKeyShape = errs.New(errs.Invalid, "natural key of shape user + product or user + amount")

// CheckNaturalKey refuses a natural key whose fields are a user plus a product or an amount,
// naming the fields. A field counts as a user (user, customer, buyer, payer, member) or a
// product or amount (product, sku, item, goods, amount, price, total) by the words of its name
// split at dots and underscores ("customer.id", "amount_minor").
func CheckNaturalKey(fields []string) error {
	var user, thing string
	for _, f := range fields {
		for _, w := range strings.FieldsFunc(strings.ToLower(f), func(r rune) bool { return r == '.' || r == '_' }) {
			switch w {
			case "user", "customer", "buyer", "payer", "member":
				user = f
			case "product", "sku", "item", "goods", "amount", "price", "total":
				thing = f
			}
		}
	}
	if user != "" && thing != "" {
		return fmt.Errorf("natural key %s: %w — two real purchases of the same product or amount are legal; "+
			"use a client idempotency key", strings.Join(fields, " + "), ErrNaturalKeyShape)
	}
	return nil
}

// DomainKey declares that an operation's identity is a unique constraint on its own domain
// table (a like: one per user per article). The claim is then the domain insert itself: a
// unique violation is the duplicate signal, answered from the existing domain row. Nothing is
// written to the keys table, so the rule survives any purge of it, and deleting the domain row
// (an unlike) lets the next insert (a like) happen again.
type DomainKey struct {
	// Table is the domain table; Constraint the name of its UNIQUE (or primary key)
	// constraint, whose columns are exactly Columns (in any order).
	Table      string
	Constraint string
	Columns    []string
}

// Validate checks the declaration against the database: the constraint exists on Table, is
// unique, and covers exactly Columns; and the columns are not a user + product or user +
// amount shape. Call it once at start-up; errors are configuration errors naming the problem.
func (d DomainKey) Validate(ctx context.Context, db *gorm.DB) error {
	if err := checkIdents(append([]string{d.Table, d.Constraint}, d.Columns...)...); err != nil {
		return fmt.Errorf("domain key: %w", err)
	}
	if len(d.Columns) == 0 {
		return fmt.Errorf("domain key %s: Columns: at least one is required", d.Table)
	}
	if err := CheckNaturalKey(d.Columns); err != nil {
		return fmt.Errorf("domain key %s: %w", d.Table, err)
	}
	var cols []string
	err := db.WithContext(ctx).Raw(`SELECT a.attname FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) AS k(attnum)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.conname = ? AND c.conrelid = to_regclass(?) AND c.contype IN ('u', 'p')`, d.Constraint, d.Table).Scan(&cols).Error
	if err != nil {
		return fmt.Errorf("domain key %s: %w", d.Table, err)
	}
	want := slices.Clone(d.Columns)
	slices.Sort(want)
	slices.Sort(cols)
	if len(cols) == 0 {
		return fmt.Errorf("domain key %s: no unique constraint %s on table %s", d.Table, d.Constraint, d.Table)
	}
	if !slices.Equal(cols, want) {
		return fmt.Errorf("domain key %s: constraint %s covers (%s), not the declared (%s)", d.Table, d.Constraint,
			strings.Join(cols, ", "), strings.Join(want, ", "))
	}
	return nil
}

// Insert is the claim of a domain-keyed operation, one atomic statement:
//
//	INSERT INTO <Table> (…) VALUES (…) ON CONFLICT ON CONSTRAINT <Constraint> DO NOTHING RETURNING *
//
// It returns true with the new row in dest, or — when the constraint says this identity exists
// — false with the existing row (read by the natural-key columns) in dest. row must hold every
// column of the key. Never "select, then insert": two racing inserts meet on the constraint.
func (d DomainKey) Insert(ctx context.Context, tx *gorm.DB, row map[string]any, dest any) (bool, error) {
	names := make([]string, 0, len(row))
	for k := range row {
		names = append(names, k)
	}
	slices.Sort(names)
	if err := checkIdents(append([]string{d.Table, d.Constraint}, names...)...); err != nil {
		return false, fmt.Errorf("domain key: %w", err)
	}
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = row[n]
	}
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")
	res := tx.WithContext(ctx).Raw(fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s) ON CONFLICT ON CONSTRAINT %s DO NOTHING RETURNING *`,
		d.Table, strings.Join(names, ", "), ph, d.Constraint), args...).Scan(dest)
	if res.Error != nil {
		return false, fmt.Errorf("domain key %s: insert: %w", d.Table, res.Error)
	}
	if res.RowsAffected == 1 {
		return true, nil
	}
	where := make([]string, len(d.Columns))
	wargs := make([]any, len(d.Columns))
	for i, c := range d.Columns {
		v, ok := row[c]
		if !ok {
			return false, fmt.Errorf("domain key %s: the row has no %s, a column of the key", d.Table, c)
		}
		where[i], wargs[i] = c+" = ?", v
	}
	// The conflicting row committed (ON CONFLICT waited for it) unless it was deleted since; then
	// the identity is free again and the caller may try once more.
	res = tx.WithContext(ctx).Raw(fmt.Sprintf(`SELECT * FROM %s WHERE %s`, d.Table, strings.Join(where, " AND ")), wargs...).Scan(dest)
	if res.Error != nil {
		return false, fmt.Errorf("domain key %s: read existing: %w", d.Table, res.Error)
	}
	if res.RowsAffected == 0 {
		return false, fmt.Errorf("domain key %s: the existing row went away; try again: %w", d.Table, ErrGuardConflict)
	}
	return false, nil
}
