package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gin-gonic/gin"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/inputcheck"
)

// PageSize is how many keys a search page shows.
const PageSize = 50

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
	After          *Cursor
	Limit          int
}

// Cursor is the keyset position after which the next page starts.
type Cursor struct {
	CreatedAt time.Time
	ID        int64
}

// String encodes the cursor for URLs: microseconds since the epoch and the id.
func (c Cursor) String() string { return fmt.Sprintf("%d_%d", c.CreatedAt.UnixMicro(), c.ID) }

// ParseCursor reads a cursor written by Cursor.String.
func ParseCursor(s string) (*Cursor, error) {
	a, b, ok := strings.Cut(s, "_")
	us, err1 := strconv.ParseInt(a, 10, 64)
	id, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || id <= 0 {
		return nil, inputErr("after", "is not a page cursor")
	}
	return &Cursor{CreatedAt: time.UnixMicro(us).UTC(), ID: id}, nil
}

var (
	digestPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
	fieldPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,4}$`)
)

// timeLayouts are the accepted forms of a time filter: RFC 3339, an HTML datetime-local
// value (read as UTC), a date.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(field, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, inputErr(field, "%q is not a time (use 2006-01-02T15:04 or RFC 3339)", s)
}

// ParseKeyFilter reads a search from URL query values (the pages and the API share it).
func ParseKeyFilter(q url.Values) (KeyFilter, error) {
	f := KeyFilter{
		Tenant:    strings.TrimSpace(q.Get("tenant")),
		Operation: strings.TrimSpace(q.Get("operation")),
		State:     claim.State(q.Get("state")),
		Digest:    strings.ToLower(strings.TrimSpace(q.Get("digest"))),
		Field:     strings.TrimSpace(q.Get("field")),
		Value:     strings.TrimSpace(q.Get("value")),
		Limit:     PageSize,
	}
	switch q.Get("attention") {
	case "", "0":
	case "1":
		f.NeedsAttention = true
	default:
		return f, inputErr("attention", "must be 1 or absent")
	}
	var err error
	if f.State != "" && !f.State.Valid() {
		return f, inputErr("state", "%q is not a key state", f.State)
	}
	if f.Digest != "" && !digestPattern.MatchString(f.Digest) {
		return f, inputErr("digest", "must be 64 hex characters")
	}
	if f.Field != "" && !fieldPattern.MatchString(f.Field) {
		return f, inputErr("field", "use letters, digits, '_' or '-', with '.' between nested names")
	}
	if f.Field == "" && f.Value != "" {
		return f, inputErr("field", "name the request field the value is for")
	}
	// The value is read as JSON when it is JSON (containment): an escaped NUL ("\u0000") would
	// reach PostgreSQL's jsonb, which refuses it.
	if ie := (*inputcheck.Error)(nil); errors.As(inputcheck.JSON([]byte(f.Value)), &ie) {
		return f, inputErr("value", "%s", ie.Reason)
	}
	if len(f.Tenant) > 128 || len(f.Operation) > 128 || len(f.Value) > 256 {
		return f, inputErr("tenant", "filters are limited to 128 characters (value: 256)")
	}
	if f.From, err = parseTime("from", q.Get("from")); err != nil {
		return f, err
	}
	if f.To, err = parseTime("to", q.Get("to")); err != nil {
		return f, err
	}
	if c := q.Get("after"); c != "" {
		if f.After, err = ParseCursor(c); err != nil {
			return f, err
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			return f, inputErr("limit", "must be between 1 and 200")
		}
		f.Limit = n
	}
	return f, nil
}

// isState asks claim whether s is a key state (kept as a name for bulk.go's uploads).
func isState(s claim.State) bool { return s.Valid() }

// Query encodes the filter (without the cursor) for a stable, shareable URL.
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
	if f.From != nil {
		set("from", f.From.Format(time.RFC3339Nano))
	}
	if f.To != nil {
		set("to", f.To.Format(time.RFC3339Nano))
	}
	if f.Limit != 0 && f.Limit != PageSize {
		set("limit", strconv.Itoa(f.Limit))
	}
	return q
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
}

// SearchKeys returns one page of keys op may see that match f, and the cursor of the next page
// (nil on the last). Tenant scope is part of the query, so nothing outside it is read or
// counted. Served by the keyset indexes on (created_at DESC, id DESC): overall, per tenant,
// per operation and per state (migrations 00001, 00002); the request filter by the GIN index.
func SearchKeys(ctx context.Context, db dbHandle, op *Operator, f KeyFilter) ([]KeySummary, *Cursor, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = PageSize
	}
	var where []string
	var args []any
	if f.Tenant != "" && !op.MaySee(f.Tenant) {
		return nil, nil, nil
	}
	cond, condArgs, none := tenantCondition(op)
	if none {
		return nil, nil, nil
	}
	if cond != "" {
		where, args = append(where, cond), append(args, condArgs...)
	}
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
	if f.After != nil {
		add("(created_at, id) < (?, ?)", f.After.CreatedAt, f.After.ID)
	}
	sql := `SELECT id, tenant, operation, key, key_digest, state, attempts, needs_attention, created_at, updated_at
		FROM idempotency_keys`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, f.Limit+1)
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

// getKey reads one key op may see; a key of another tenant is ErrNotFound, exactly like a
// missing one, so guessing ids tells nothing.
func (s *Server) getKey(ctx context.Context, op *Operator, id int64) (*claim.Key, error) {
	k, err := s.claims.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := decide(op, objKey, strconv.FormatInt(id, 10), []string{k.Tenant}, false); err != nil {
		return nil, err
	}
	return k, nil
}

// keyParam reads the key named by the route's {id}, under the same rule as getKey.
func (s *Server) keyParam(ctx context.Context, c *gin.Context, r *request) (*claim.Key, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	return s.getKey(ctx, r.op, id)
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("id %q: %w", truncate(s, 20), ErrNotFound)
	}
	return id, nil
}

// MaxFound bounds a find by key: a key quoted by a customer exists once per tenant and
// operation, so more than this many matches is only listed up to here.
const MaxFound = 100

// FindKeys returns the keys op may see whose raw key is exactly key, in every tenant and
// operation (tenant · operation order), at most MaxFound of them. Tenant scope is part of the
// query, like SearchKeys. Served by the index on the key column (migration 00035): the digest
// cannot serve it, it is an HMAC over tenant|operation|key.
func FindKeys(ctx context.Context, db dbHandle, op *Operator, key string) ([]KeySummary, error) {
	if err := claim.ValidateKey(key); err != nil {
		return nil, err
	}
	where, args := "key = ?", []any{key}
	cond, condArgs, none := tenantCondition(op)
	if none {
		return nil, nil
	}
	if cond != "" {
		where, args = where+" AND "+cond, append(args, condArgs...)
	}
	sql := `SELECT id, tenant, operation, key, key_digest, state, attempts, needs_attention, created_at, updated_at
		FROM idempotency_keys WHERE ` + where + ` ORDER BY tenant, operation, id LIMIT ?`
	args = append(args, MaxFound)
	var rows []KeySummary
	if err := db.WithContext(ctx).Raw(sql, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("find key: %w", err)
	}
	return rows, nil
}

// tenantCondition is the SQL condition that limits keys to the tenants op may see: "" for an
// operator of every tenant, none when op sees no tenant at all. Key search and find by key both
// use it, so the two cannot drift apart.
func tenantCondition(op *Operator) (cond string, args []any, none bool) {
	if op.SeesAllTenants() {
		return "", nil, false
	}
	if len(op.Tenants) == 0 {
		return "", nil, true
	}
	return "tenant IN ?", []any{op.Tenants}, false
}
