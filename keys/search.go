package keys

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// Reads of the keys table that operators need (the console's search, find by key and dashboard;
// the daemon's gauges) live here, so the SQL and the indexes that serve it are written once.

// Scope limits a read to the tenants a caller may see: every tenant when All, else only
// Tenants (none at all when Tenants is empty). The zero Scope sees nothing.
type Scope struct {
	All     bool
	Tenants []string
}

// AllTenants is the scope of a reader of every tenant (the daemon, an admin of "*").
func AllTenants() Scope { return Scope{All: true} }

// MaySee reports whether the scope covers tenant.
func (s Scope) MaySee(tenant string) bool {
	if s.All {
		return true
	}
	for _, t := range s.Tenants {
		if t == tenant {
			return true
		}
	}
	return false
}

// SQL is the scope as a condition on the keys table's tenant column: "true" for every tenant,
// "false" and none when it sees no tenant at all. Every read here uses it, so search, find and
// counts cannot drift apart.
func (s Scope) SQL() (cond string, args []any, none bool) {
	switch {
	case s.All:
		return "true", nil, false
	case len(s.Tenants) == 0:
		return "false", nil, true
	}
	return "tenant IN ?", []any{s.Tenants}, false
}

// SearchPageSize is a search page's default and SearchMaxLimit its largest size.
const (
	SearchPageSize = 50
	SearchMaxLimit = 200
)

// KeyFilter is a key search: every field optional; results are newest first, paged by the
// keyset (created_at, id) — never by OFFSET, so page 20,000 costs what page 1 costs.
type KeyFilter struct {
	Tenant    string
	Operation string
	State     claim.State
	From, To  *time.Time
	Digest    string
	// Field and Value filter on the canonical request: request @> {"Field": Value}; a dotted
	// Field names a nested object ("customer.id").
	Field, Value string
	// NeedsAttention keeps only keys flagged for an operator (attention=1).
	NeedsAttention bool
	// Unresolved keeps only keys whose outcome outside is unknown and that retention keeps until
	// they are resolved (claim.UnresolvedSQL; unresolved=1).
	Unresolved bool
	After      *Cursor
	Limit      int
}

// Query encodes the filter (without the cursor) as the query of a stable, shareable URL; the
// console reads it back with its ParseKeyFilter.
func (f KeyFilter) Query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("tenant", f.Tenant)
	set("operation", f.Operation)
	set("state", string(f.State))
	set("digest", f.Digest)
	set("field", f.Field)
	set("value", f.Value)
	if f.NeedsAttention {
		set("attention", "1")
	}
	if f.Unresolved {
		set("unresolved", "1")
	}
	if f.From != nil {
		set("from", f.From.Format(time.RFC3339Nano))
	}
	if f.To != nil {
		set("to", f.To.Format(time.RFC3339Nano))
	}
	if f.Limit != 0 && f.Limit != SearchPageSize {
		set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Cursor is the keyset position after which the next page starts.
type Cursor struct {
	CreatedAt time.Time
	ID        int64
}

// String encodes the cursor for URLs: microseconds since the epoch and the id.
func (c Cursor) String() string { return fmt.Sprintf("%d_%d", c.CreatedAt.UnixMicro(), c.ID) }

// ParseCursor reads a cursor written by Cursor.String; ok is false when s is not one.
func ParseCursor(s string) (c *Cursor, ok bool) {
	a, b, cut := strings.Cut(s, "_")
	us, err1 := strconv.ParseInt(a, 10, 64)
	id, err2 := strconv.ParseInt(b, 10, 64)
	if !cut || err1 != nil || err2 != nil || id <= 0 {
		return nil, false
	}
	return &Cursor{CreatedAt: time.UnixMicro(us).UTC(), ID: id}, true
}

// KeySummary is one row of a search result.
type KeySummary struct {
	ID             int64       `json:"id"`
	Tenant         string      `json:"tenant"`
	Operation      string      `json:"operation"`
	Key            string      `json:"key"`
	KeyDigest      string      `json:"digest"`
	State          claim.State `json:"state"`
	Attempts       int         `json:"attempts"`
	NeedsAttention bool        `json:"needs_attention"`
	CreatedAt      time.Time   `json:"created_at"`
	UpdatedAt      time.Time   `json:"updated_at"`
	// AmountMinor and Currency are the amount the key's intent declared (nil: none), for the
	// console's list; the API's search answers without them, as it does without the request.
	AmountMinor *int64  `json:"-"`
	Currency    *string `json:"-"`
}

const summaryColumns = `id, tenant, operation, key, key_digest, state, attempts, needs_attention, created_at, updated_at, amount_minor, currency`

// perTenantPagesUpTo: a search of an operator of at most this many tenants reads a page of each
// and merges them; of more, it walks the listing index, where their keys are a large share.
const perTenantPagesUpTo = 16

// SearchKeys returns one page of the keys in scope that match f, and the cursor of the next page
// (nil on the last). The scope is part of the query, so nothing outside it is read or counted.
// Served by the keyset indexes on (created_at DESC, id DESC): overall, per tenant, per operation
// and per state (migrations 00001, 00002); the request filter by the GIN index.
func SearchKeys(ctx context.Context, db *gorm.DB, scope Scope, f KeyFilter) ([]KeySummary, *Cursor, error) {
	if f.Limit <= 0 || f.Limit > SearchMaxLimit {
		f.Limit = SearchPageSize
	}
	if f.Tenant != "" && !scope.MaySee(f.Tenant) {
		return nil, nil, nil
	}
	cond, args, none := scope.SQL()
	if none {
		return nil, nil, nil
	}
	where := []string{cond}
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }
	if f.Tenant != "" {
		add("tenant = ?", f.Tenant)
	}
	if f.Operation != "" {
		add("operation = ?", f.Operation)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if f.Digest != "" {
		add("key_digest = ?", f.Digest)
	}
	if f.From != nil {
		add("created_at >= ?", *f.From)
	}
	if f.To != nil {
		add("created_at < ?", *f.To)
	}
	if f.Field != "" {
		add("request @> ?::jsonb", containment(f.Field, f.Value))
	}
	if f.NeedsAttention {
		add("needs_attention")
	}
	if f.Unresolved {
		add(claim.UnresolvedSQL)
	}
	if f.After != nil {
		add("(created_at, id) < (?, ?)", f.After.CreatedAt, f.After.ID)
	}
	// The limit is written into the statement, not passed: a prepared statement's generic plan
	// (which the console's scoped statements keep, internal/tenantdb) plans a LIMIT parameter as
	// a tenth of the rows, and so sorted a bitmap scan of every match where walking a keyset
	// index stops after a page (a filtered page of a 3-tenant operator over 1M keys: ×17).
	page := ` ORDER BY created_at DESC, id DESC LIMIT ` + strconv.Itoa(f.Limit+1)
	sql := `SELECT ` + summaryColumns + ` FROM idempotency_keys k WHERE ` + strings.Join(where, " AND ") + page
	if n := len(scope.Tenants); !scope.All && f.Tenant == "" && n > 1 && n <= perTenantPagesUpTo {
		// A page of each tenant, merged: each is a walk of idempotency_keys_tenant_listing_idx
		// that stops after a page. As one statement with tenant IN (…) the planner — which under
		// row-level security takes the policy's tenants for a few rows — read every key of the
		// tenants past the cursor and sorted them (a deep page of 3 tenants at 1M keys: 14,754
		// entries, 20–30 ms; linear in the tenants' keys).
		var parts []string
		var pargs []any
		for _, t := range scope.Tenants {
			// where[0] and args[0] are the scope's (tenant IN ?, the tenants).
			own := append([]string{"tenant = ?"}, where[1:]...)
			parts = append(parts, `(SELECT `+summaryColumns+` FROM idempotency_keys k WHERE `+strings.Join(own, " AND ")+page+`)`)
			pargs = append(append(pargs, t), args[1:]...)
		}
		sql = `SELECT ` + summaryColumns + ` FROM (` + strings.Join(parts, " UNION ALL ") + `) k` + page
		args = pargs
	}
	var rows []KeySummary
	if err := db.WithContext(ctx).Raw(sql, args...).Scan(&rows).Error; err != nil {
		return nil, nil, fmt.Errorf("search keys: %w", err)
	}
	if len(rows) <= f.Limit {
		return rows, nil, nil
	}
	rows = rows[:f.Limit]
	last := rows[len(rows)-1]
	return rows, &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// containment builds the jsonb document of a request-field filter. The value is read as JSON
// when it is a JSON scalar (42, true, "x"), else as a string.
func containment(field, value string) string {
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		v = value
	}
	if _, isObj := v.(map[string]any); isObj {
		v = value
	}
	if _, isArr := v.([]any); isArr {
		v = value
	}
	parts := strings.Split(field, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		v = map[string]any{parts[i]: v}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// MaxFound bounds a find by key: a key quoted by a customer exists once per tenant and
// operation, so more than this many matches is only listed up to here.
const MaxFound = 100

// FindKeys returns the keys in scope whose raw key is exactly key, in every tenant and operation
// (tenant · operation order), at most MaxFound of them. Served by the index on the key column
// (migration 00035): the digest cannot serve it, it is an HMAC over tenant|operation|key.
// Errors: ErrInvalidKey.
func FindKeys(ctx context.Context, db *gorm.DB, scope Scope, key string) ([]KeySummary, error) {
	if err := claim.ValidateKey(key); err != nil {
		return nil, err
	}
	cond, args, none := scope.SQL()
	if none {
		return nil, nil
	}
	sql := `SELECT ` + summaryColumns + ` FROM idempotency_keys WHERE key = ? AND ` + cond +
		` ORDER BY tenant, operation, id LIMIT ?`
	args = append(append([]any{key}, args...), MaxFound)
	var rows []KeySummary
	if err := db.WithContext(ctx).Raw(sql, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("find key: %w", err)
	}
	return rows, nil
}

// KeyName is how people know a key: its tenant, operation and raw key.
type KeyName struct {
	ID                     int64
	Tenant, Operation, Key string
}

// NamesOf returns the name of each key of ids that still exists (any order; at most len(ids)
// rows, by primary key). It does not scope: callers decide per key what the reader may see.
func NamesOf(ctx context.Context, db *gorm.DB, ids []int64) ([]KeyName, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []KeyName
	if err := db.WithContext(ctx).Raw(`SELECT id, tenant, operation, key FROM idempotency_keys WHERE id IN ?`, ids).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("key names: %w", err)
	}
	return rows, nil
}
