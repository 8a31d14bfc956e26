package console

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/templates"
)

func stateNames() []string {
	states := claim.States()
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

func searchForm(q url.Values) templates.KeySearch {
	return templates.KeySearch{Tenant: q.Get("tenant"), Operation: q.Get("operation"), State: q.Get("state"),
		From: q.Get("from"), To: q.Get("to"), Digest: q.Get("digest"), Field: q.Get("field"), Value: q.Get("value"),
		Attention: q.Get("attention") == "1", Unresolved: q.Get("unresolved") == "1"}
}

// keys is the key search page. Its URL holds the whole search, so it can be shared.
func (s *Server) keys(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	v := templates.KeysView{Search: searchForm(q), States: stateNames(), IsFirst: q.Get("after") == ""}
	f, err := ParseKeyFilter(q)
	v.FirstURL = "/keys?" + f.Query().Encode()
	if err != nil {
		v.Error = pageMessage(c.Request.Context(), err)
		s.render(c, statusOf(err), templates.KeysPage(chrome(r, "keys"), v))
		return nil
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' keys, and its name
	rows, next, err := s.searchKeys(ctx, r.op, f)
	v.Unavailable = missed.list()
	if err != nil {
		return err
	}
	for _, k := range rows {
		v.Rows = append(v.Rows, templates.KeyRow{ID: k.ID, Href: fmt.Sprintf("/keys/%d", k.ID), Tenant: k.Tenant,
			Operation: k.Operation, Key: k.Key, DigestShort: k.KeyDigest[:12], State: string(k.State),
			Attempts: k.Attempts, CreatedAt: k.CreatedAt, NeedsAttention: k.NeedsAttention,
			AmountMinor: k.AmountMinor, Currency: deref(k.Currency)})
	}
	for name, vals := range f.Query() {
		v.BulkFields = append(v.BulkFields, templates.Field{Name: name, Value: vals[0]})
	}
	sort.Slice(v.BulkFields, func(i, j int) bool { return v.BulkFields[i].Name < v.BulkFields[j].Name })
	if r.op.Role >= access.RoleOperator && len(rows) > 0 {
		v.BulkCap = s.cfg.BulkCap
		if v.IsFirst && next == nil && len(rows) <= s.cfg.BulkCap {
			v.Matching = len(rows)
		} else if v.Matching, v.MatchingMore, err = s.countMatching(ctx, r.op, f); err != nil {
			return err
		}
	}
	if next != nil {
		nq := f.Query()
		nq.Set("after", next.String())
		v.NextURL = "/keys?" + nq.Encode()
	}
	s.render(c, http.StatusOK, templates.KeysPage(chrome(r, "keys"), v))
	return nil
}

// apiKeys is GET /api/v1/keys: the key search with the page's filters; the next page is asked
// for with ?after=<next_cursor>.
func (s *Server) apiKeys(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	if cur := q.Get("cursor"); cur != "" && q.Get("after") == "" {
		q.Set("after", cur)
	}
	f, err := ParseKeyFilter(q)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, next, err := s.searchKeys(ctx, r.op, f)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []KeySummary{}
	}
	out := gin.H{"keys": rows, "next_cursor": nil}
	if next != nil {
		out["next_cursor"] = next.String()
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// deref is *s, "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
