package console

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
	"github.com/idemops/idemops/keys"
)

// PageSize is how many keys a search page shows.
const PageSize = keys.SearchPageSize

// KeyFilter, Cursor and KeySummary are claim's: the key search is claim's query; the console
// parses it from a URL (ParseKeyFilter) and renders its rows.
type (
	KeyFilter  = keys.KeyFilter
	Cursor     = keys.Cursor
	KeySummary = keys.KeySummary
)

// ParseCursor reads a cursor written by Cursor.String.
func ParseCursor(s string) (*Cursor, error) {
	c, ok := keys.ParseCursor(s)
	if !ok {
		return nil, inputErr("after", "is not a page cursor")
	}
	return c, nil
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
	switch q.Get("unresolved") {
	case "", "0":
	case "1":
		f.Unresolved = true
	default:
		return f, inputErr("unresolved", "must be 1 or absent")
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
	if ie := (*errs.FieldError)(nil); errors.As(inputcheck.JSON([]byte(f.Value)), &ie) {
		return f, inputErr("value", "%s", ie.Why)
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
		if err != nil || n < 1 || n > keys.SearchMaxLimit {
			return f, inputErr("limit", "must be between 1 and %d", keys.SearchMaxLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// isState asks claim whether s is a key state (kept as a name for bulk.go's uploads).
func isState(s claim.State) bool { return s.Valid() }

// keyScope is the tenants op may see, as claim's reads take them.
func keyScope(op *access.Operator) keys.Scope {
	return keys.Scope{All: op.SeesAllTenants(), Tenants: op.Tenants}
}

// keyScope is keyScope(op), unless a test dropped the Go scope of key reads (goScopeOff) to
// show that row-level security still hides other tenants' keys.
func (s *Server) keyScope(op *access.Operator) keys.Scope {
	if s.goScopeOff {
		return keys.AllTenants()
	}
	return keyScope(op)
}

// SearchKeys returns one page of keys op may see that match f (keys.SearchKeys in op's scope).
func SearchKeys(ctx context.Context, db *gorm.DB, op *access.Operator, f KeyFilter) ([]KeySummary, *Cursor, error) {
	return keys.SearchKeys(access.Bind(ctx, op), db, keyScope(op), f)
}

// searchKeys is the key search of op in every cell holding one of its tenants, each asked for
// the tenants it holds and the answers merged (keys.MergePages); with one cell, SearchKeys.
func (s *Server) searchKeys(ctx context.Context, op *access.Operator, f KeyFilter) ([]KeySummary, *Cursor, error) {
	pages, err := eachCell(ctx, s.cells.For(s.keyScope(op), f.Tenant), func(ctx context.Context, c scopedCell) (keys.Page, error) {
		rows, next, err := keys.SearchKeys(ctx, c.db, c.held, f)
		return keys.Page{Rows: rows, Next: next}, err
	})
	if err != nil {
		return nil, nil, err
	}
	if len(pages) == 1 {
		return pages[0].Rows, pages[0].Next, nil
	}
	rows, next := keys.MergePages(pages, f.Limit)
	return rows, next, nil
}

// findKeys is the find by key of op in every cell holding one of its tenants (keys.MergeFound);
// with one cell, FindKeys.
func (s *Server) findKeys(ctx context.Context, op *access.Operator, key string) ([]KeySummary, error) {
	found, err := eachCell(ctx, s.cells.For(keyScope(op), ""), func(ctx context.Context, c scopedCell) ([]KeySummary, error) {
		return keys.FindKeys(ctx, c.db, c.held, key)
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if err := claim.ValidateKey(key); err != nil {
		return nil, err
	}
	return keys.MergeFound(found), nil
}

// getKey reads one key op may see; a key of another tenant is ErrNotFound, exactly like a
// missing one, so guessing ids tells nothing.
func (s *Server) getKey(ctx context.Context, op *access.Operator, id int64) (*claim.Key, error) {
	k, _, err := s.keyIn(ctx, op, id)
	return k, err
}

// keyIn is getKey with the cell the key lives in: the one that holds its tenant, asked in
// every cell of op's tenants (ids are unique across cells).
func (s *Server) keyIn(ctx context.Context, op *access.Operator, id int64) (*claim.Key, *cell, error) {
	return findIn(ctx, s.cells, op, access.ObjKey, id, func(ctx context.Context, c *cell, id int64) (*claim.Key, error) {
		return c.claims.Get(ctx, id)
	}, func(k *claim.Key) string { return k.Tenant })
}

// readScoped reads the object id of kind with read, and gives it to op only when its tenant is
// within op's (access.Decide): one of another tenant is ErrNotFound.
func readScoped[T any](ctx context.Context, op *access.Operator, kind access.ObjectKind, id int64,
	read func(context.Context, int64) (T, error), tenant func(T) string) (T, error) {
	var none T
	v, err := read(ctx, id)
	if err != nil {
		return none, err
	}
	if err := access.Decide(op, kind, strconv.FormatInt(id, 10), []string{tenant(v)}, false); err != nil {
		return none, err
	}
	return v, nil
}

// keyParam reads the key named by the route's {id}, under the same rule as getKey.
func (s *Server) keyParam(ctx context.Context, c *gin.Context, r *request) (*claim.Key, error) {
	k, _, err := s.keyParamIn(ctx, c, r)
	return k, err
}

// keyParamIn is keyParam with the key's cell (keyIn).
func (s *Server) keyParamIn(ctx context.Context, c *gin.Context, r *request) (*claim.Key, *cell, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, nil, err
	}
	return s.keyIn(ctx, r.op, id)
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("id %q: %w", truncate(s, 20), ErrNotFound)
	}
	return id, nil
}

// paramIn reads the object the route's {id} names with in, a lookup that asks the cell that has
// it (runIn, bulkRunIn): the pages and the API read an object alike.
func paramIn[T any](s *Server, c *gin.Context, in func(context.Context, int64) (*T, *cell, error)) (*T, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	obj, _, err := in(ctx, id)
	return obj, err
}

// MaxFound bounds a find by key (keys.MaxFound).
const MaxFound = keys.MaxFound

// FindKeys returns the keys op may see whose raw key is exactly key (keys.FindKeys in op's
// scope).
func FindKeys(ctx context.Context, db *gorm.DB, op *access.Operator, key string) ([]KeySummary, error) {
	return keys.FindKeys(access.Bind(ctx, op), db, keyScope(op), key)
}
