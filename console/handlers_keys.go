package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
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
		Attention: q.Get("attention") == "1"}
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
	rows, next, err := SearchKeys(ctx, s.db, r.op, f)
	if err != nil {
		return err
	}
	for _, k := range rows {
		v.Rows = append(v.Rows, templates.KeyRow{ID: k.ID, Href: fmt.Sprintf("/keys/%d", k.ID), Tenant: k.Tenant,
			Operation: k.Operation, Key: k.Key, DigestShort: k.KeyDigest[:12], State: string(k.State),
			Attempts: k.Attempts, CreatedAt: k.CreatedAt, NeedsAttention: k.NeedsAttention})
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

// findKey turns an exact key into its digest on the server and redirects to a search by
// digest: the key itself never appears in a URL, a log line or the audit log.
func (s *Server) findKey(c *gin.Context, r *request) error {
	tenant, operation, key := strings.TrimSpace(c.PostForm("tenant")), strings.TrimSpace(c.PostForm("operation")), c.PostForm("key")
	if tenant == "" && operation == "" {
		return s.findKeyAnywhere(c, r, key)
	}
	if tenant == "" || operation == "" {
		return inputErr("tenant", "an exact key search needs the tenant and the operation (the digest covers all three)")
	}
	if err := claim.ValidateKey(key); err != nil {
		return err
	}
	q := url.Values{}
	q.Set("tenant", tenant)
	q.Set("operation", operation)
	q.Set("digest", claim.Digest(s.cfg.DigestSecret, tenant, operation, key))
	c.Redirect(http.StatusSeeOther, "/keys?"+q.Encode())
	return nil
}

// findKeyAnywhere is the header's find box: the raw key arrives in the POST body and is looked
// up in every tenant and operation the operator may see. One match opens the key; several
// answer a chooser (tenant · operation · key); none an empty state. The key never appears in
// a URL: the chooser is the POST's own answer and a single match redirects by id.
func (s *Server) findKeyAnywhere(c *gin.Context, r *request, key string) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := FindKeys(ctx, s.db, r.op, key)
	if err != nil {
		return err
	}
	if len(rows) == 1 {
		c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", rows[0].ID))
		return nil
	}
	v := templates.KeyFindView{Key: key, Limit: MaxFound, Truncated: len(rows) >= MaxFound}
	for _, k := range rows {
		v.Rows = append(v.Rows, templates.KeyRow{ID: k.ID, Href: fmt.Sprintf("/keys/%d", k.ID), Tenant: k.Tenant,
			Operation: k.Operation, Key: k.Key, DigestShort: k.KeyDigest[:12], State: string(k.State),
			Attempts: k.Attempts, CreatedAt: k.CreatedAt, NeedsAttention: k.NeedsAttention})
	}
	s.render(c, http.StatusOK, templates.KeyFindPage(chrome(r, "keys"), v))
	return nil
}

func (s *Server) keyView(ctx context.Context, r *request, k *claim.Key) (templates.KeyView, error) {
	evs, err := s.claims.History(ctx, k.ID, 1000)
	if err != nil {
		return templates.KeyView{}, err
	}
	v := templates.KeyView{Key: k, Events: evs,
		Request:   templates.Body{Name: "Request", Present: len(k.Request) > 0, Size: len(k.Request)},
		Response:  templates.Body{Name: "Response", Present: len(k.ResponseBody) > 0, Size: len(k.ResponseBody)},
		CanReveal: r.op.Role >= access.RoleOperator, CanCheck: r.op.Role >= access.RoleOperator,
		CanReplay: r.op.Role >= access.RoleOperator, Refusal: k.ReplayRefusalPhrase(), CanHold: r.op.Role >= access.RoleAdmin}
	v.Panels = s.keyPanels(ctx, k)
	v.Summary = s.intentSummary(k)
	answers, err := s.claims.Answers(ctx, k.ID)
	if err != nil {
		return templates.KeyView{}, err
	}
	if v.Related, err = s.keyRelated(ctx, r.op, k); err != nil {
		return templates.KeyView{}, err
	}
	v.EventLinks = eventLinks(evs, k.ID, r.op.Role >= access.RoleOperator)
	for _, a := range answers {
		v.Answers = append(v.Answers, templates.AnswerRow{Kind: string(a.Kind), Status: a.Status, Count: a.Count,
			First: a.FirstAt, Last: a.LastAt})
	}
	return v, nil
}

// intentSummary is the key's request fields its operation declares non-sensitive
// (IntentSpec.Summary), shown without reveal. The amount is formatted with its currency by the
// money package (the currency then needs no row of its own); a key whose operation is not
// registered or declares nothing has no summary.
func (s *Server) intentSummary(k *claim.Key) []templates.SummaryRow {
	if s.cfg.Operations == nil {
		return nil
	}
	o, ok := s.cfg.Operations(k.Operation)
	if !ok {
		return nil
	}
	spec := o.Intent()
	fields := spec.SummaryOf(k.Request)
	amountShown := false
	for _, f := range fields {
		if f.Path == spec.AmountField && k.AmountMinor != nil && k.Currency != nil {
			amountShown = true
		}
	}
	var out []templates.SummaryRow
	for _, f := range fields {
		switch {
		case f.Path == spec.AmountField && amountShown:
			out = append(out, templates.SummaryRow{Label: "amount", Value: money.Display(*k.AmountMinor, *k.Currency)})
		case f.Path == spec.CurrencyField && amountShown:
		default:
			out = append(out, templates.SummaryRow{Label: strings.ReplaceAll(f.Path, "_", " "), Value: f.Value})
		}
	}
	return out
}

// key is the key detail page.
func (s *Server) key(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}

// reveal shows the request and response bodies, after recording the reveal in the audit log
// and in the key's history: no audit row, no reveal.
func (s *Server) reveal(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "key.reveal",
		Target: fmt.Sprintf("key:%d", k.ID), Tenant: k.Tenant,
		Detail: map[string]any{"digest": k.KeyDigest, "operation": k.Operation, "fields": []string{"request", "response"}}}); err != nil {
		return err
	}
	if err := s.claims.RecordEvent(ctx, k.ID, "revealed", r.op.Actor(), map[string]any{"fields": []string{"request", "response"}}); err != nil {
		return err
	}
	s.metrics.reveals.Inc()
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	v.Request.Revealed, v.Request.Text = true, prettyJSON(k.Request)
	v.Response.Revealed, v.Response.Text = true, bodyText(k.ResponseBody)
	v.Headers = string(k.ResponseHeaders)
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.Bodies(chrome(r, "keys"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}

func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func bodyText(b []byte) string {
	if json.Valid(b) {
		return prettyJSON(b)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("(%d bytes of binary data)\n%x", len(b), b)
}

// checkDownstream asks the key's Operation, read-only, whether downstream has the document, and
// records the answer in the key's history and the audit log.
func (s *Server) checkDownstream(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	// The lookup has its own timeout; the reads and records around it share this one.
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	k, err := s.getKey(ctx, r.op, id)
	if err != nil {
		return err
	}
	check := s.lookup(c.Request.Context(), r.op, k)
	detail := map[string]any{"found": check.Found}
	answer := "not_found"
	switch {
	case check.Error.Format != "":
		detail["error"], answer = check.Error.String(), "error"
	case check.Found:
		detail["summary"], answer = check.Summary.String(), "found"
	}
	s.metrics.checks.WithLabelValues(answer).Inc()
	if err := s.claims.RecordEvent(ctx, k.ID, "downstream_checked", r.op.Actor(), detail); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "key.check_downstream",
		Target: fmt.Sprintf("key:%d", k.ID), Tenant: k.Tenant,
		Detail: map[string]any{"digest": k.KeyDigest, "answer": answer}}); err != nil {
		return err
	}
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	v.Check = check
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.CheckResult(chrome(r, "keys"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}

// lookup runs the Operation's read-only Lookup with the lease fields taken from the key.
func (s *Server) lookup(parent context.Context, op *access.Operator, k *claim.Key) templates.CheckView {
	v := templates.CheckView{Done: true}
	if s.cfg.Operations == nil {
		v.Error = errs.Phrasef("this console has no downstream operations configured")
		return v
	}
	o, ok := s.cfg.Operations(k.Operation)
	if !ok {
		v.Error = errs.Phrasef("no operation %q is registered", k.Operation)
		return v
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.LookupTimeout)
	defer cancel()
	doc, err := o.Lookup(ctx, k.LookupLease(op.Actor()))
	switch {
	case err != nil:
		v.Error = errs.Verbatim(truncate(err.Error(), 300))
	case doc == nil:
	case doc.Failure != nil:
		v.Found, v.Summary = true, errs.Phrasef("failed (%s: %s)", doc.Failure.Code, truncate(doc.Failure.Detail, 200))
	default:
		v.Found, v.Summary = true, errs.Phrasef("resource %s", doc.ResourceID)
	}
	return v
}
