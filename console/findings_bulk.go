package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Bulk actions on findings: the one action of each step — preview, start, approve or reject —
// that the pages, /api/v1 and the command line share; they decode and answer differently.

// FindingsBulkInput is a bulk action as asked: the findings filter (the query parameters of the
// findings page: kind, channel, bill_date, run, key, order_no, currency, amount_min,
// amount_max), the findings picked by hand (IDs; nil: all the filter matches), the action, the
// reason and the note, and the newest finding the preview saw (UpTo; 0: none seen yet).
type FindingsBulkInput struct {
	Filter     url.Values
	IDs        []int64
	Selected   bool
	Action     string
	ReasonCode string
	Note       string
	UpTo       int64
}

// bulkRequest is in as a reconcile.BulkRequest for op (its scope as the filter's visibility).
func (s *Server) bulkRequest(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (reconcile.BulkRequest, error) {
	q := url.Values{}
	for _, k := range findingQueryFields {
		if v := in.Filter.Get(k); v != "" && k != "view" {
			q.Set(k, v)
		}
	}
	f, _, err := parseFindingFilter(q)
	if err != nil {
		return reconcile.BulkRequest{}, err
	}
	if f, err = s.visibleTo(ctx, op, f); err != nil {
		return reconcile.BulkRequest{}, err
	}
	if in.Selected {
		f.IDs = in.IDs
	}
	return reconcile.BulkRequest{Filter: f, Selected: in.Selected, Action: in.Action, ReasonCode: in.ReasonCode, Note: in.Note,
		By: reconcile.BulkOperator{ID: op.ID, Name: op.Name, IP: ip}}, nil
}

// previewFindingsBulk is what a bulk action would act on (reconcile.PreviewBulk in op's scope).
// A preview without an action yet (the page's first step) previews "resolve" with no reason:
// counts do not depend on them.
func (s *Server) previewFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (*reconcile.BulkPreview, error) {
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.QueryTimeout)
	defer cancel()
	req, err := s.bulkRequest(ctx, op, ip, in)
	if err != nil {
		return nil, err
	}
	return s.recon.PreviewBulk(ctx, req)
}

// startFindingsBulk starts a bulk action (reconcile.StartBulk in op's scope, up to the newest
// finding its preview saw).
func (s *Server) startFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (*reconcile.BulkRun, error) {
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.QueryTimeout)
	defer cancel()
	req, err := s.bulkRequest(ctx, op, ip, in)
	if err != nil {
		return nil, err
	}
	return s.recon.StartBulk(ctx, req, in.UpTo)
}

// decideFindingsBulk approves or rejects bulk run id as op (the route's scope check passed:
// op covers its findings' tenants).
func (s *Server) decideFindingsBulk(ctx context.Context, op *access.Operator, ip string, id int64, approve bool) (*reconcile.BulkRun, error) {
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	return s.recon.DecideBulk(ctx, id, reconcile.BulkOperator{ID: op.ID, Name: op.Name, IP: ip}, approve)
}

// bulkInputForm reads a bulk form: the filter fields, scope (all or selected) with the picked
// ids (id, repeated), action, reason_code, note, upto.
func bulkInputForm(form url.Values) (FindingsBulkInput, error) {
	in := FindingsBulkInput{Filter: url.Values{}, Action: form.Get("action"), ReasonCode: form.Get("reason_code"), Note: form.Get("note")}
	for _, k := range findingQueryFields {
		if v := form.Get(k); v != "" {
			in.Filter.Set(k, v)
		}
	}
	switch form.Get("scope") {
	case "all", "":
	case "selected":
		in.Selected = true
		raw := form["id"]
		if len(raw) == 0 {
			return in, inputErr("id", "no finding selected: tick the findings to act on, or take every finding matching the filter")
		}
		if len(raw) > reconcile.MaxBulkSelection {
			return in, inputErr("id", "%d findings selected; at most %d by hand", len(raw), reconcile.MaxBulkSelection)
		}
		for _, v := range raw {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil || id <= 0 {
				return in, inputErr("id", "%q is not a finding id", truncate(v, 20))
			}
			in.IDs = append(in.IDs, id)
		}
	default:
		return in, inputErr("scope", "is all or selected")
	}
	if u := form.Get("upto"); u != "" {
		n, err := strconv.ParseInt(u, 10, 64)
		if err != nil || n < 0 {
			return in, inputErr("upto", "is not a finding id")
		}
		in.UpTo = n
	}
	return in, nil
}

// amountsText formats amounts per currency ("1,234.50 CNY · 20.00 USD" before localizing).
func amountsText(amounts map[string]int64) []string {
	curs := make([]string, 0, len(amounts))
	for c := range amounts {
		curs = append(curs, c)
	}
	sort.Strings(curs)
	out := make([]string, len(curs))
	for i, c := range curs {
		out[i] = money.Display(amounts[c], c)
	}
	return out
}

// bulkPreviewView is the preview page of in: counts, amounts, sample and the start form (as
// typed when form is a refused one).
func (s *Server) bulkPreviewView(ctx context.Context, r *request, in FindingsBulkInput, p *reconcile.BulkPreview,
	form *templates.FindingForm) (templates.FindingsBulkPreviewView, error) {
	v := templates.FindingsBulkPreviewView{Count: p.Count, Amounts: amountsText(p.Amounts), UpTo: p.UpTo,
		NeedsApproval: p.NeedsApproval, ApprovalAbove: p.ApprovalAbove, TooMany: p.TooMany, Cap: p.Cap, Selected: in.Selected,
		Reasons: findingReasons(), Form: form, Action: in.Action}
	for k, n := range p.ByKind {
		v.ByKind = append(v.ByKind, templates.KindCount{Kind: string(k), N: n})
	}
	sort.Slice(v.ByKind, func(i, j int) bool { return v.ByKind[i].Kind < v.ByKind[j].Kind })
	names, err := s.findingKeyNames(ctx, r.op, p.Sample)
	if err != nil {
		return v, err
	}
	for _, f := range p.Sample {
		v.Sample = append(v.Sample, findingRow(f, names))
	}
	if err := s.findingChannelKinds(ctx, v.Sample); err != nil {
		return v, err
	}
	v.Fields = formFields(in.Filter)
	if in.Selected {
		v.Fields = append(v.Fields, templates.Field{Name: "scope", Value: "selected"})
		for _, id := range in.IDs {
			v.Fields = append(v.Fields, templates.Field{Name: "id", Value: strconv.FormatInt(id, 10)})
		}
	} else {
		v.Fields = append(v.Fields, templates.Field{Name: "scope", Value: "all"})
	}
	list := url.Values{}
	for k, vals := range in.Filter {
		list[k] = vals
	}
	list.Set("view", "list")
	if list.Get("state") == "" {
		list.Set("state", "open")
	}
	v.FilterHref = "/reconcile/findings?" + list.Encode()
	return v, nil
}

// bulkRunView is a bulk run's page.
func bulkRunView(b *reconcile.BulkRun, op *access.Operator) templates.FindingsBulkRunView {
	v := templates.FindingsBulkRunView{ID: b.ID, Href: fmt.Sprintf("/reconcile/findings/bulk/%d", b.ID), Action: b.Action,
		ReasonCode: b.ReasonCode, ReasonLabel: reconcile.ReasonLabel(b.ReasonCode), Note: b.Note, Filter: describeFilter(b.Filter),
		Selected: b.Selected, Operator: b.Operator, State: b.State, Total: b.Total, Processed: b.Processed, Amounts: amountsText(b.Amounts),
		Approver: strp(b.Approver), Error: strp(b.Error), CreatedAt: b.CreatedAt, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
		Live: b.Live(), CanDecide: b.State == reconcile.BulkPendingApproval && op.Role >= access.RoleOperator && op.ID != b.OperatorID}
	for k, n := range b.Results {
		v.Results = append(v.Results, templates.KindCount{Kind: k, N: n})
	}
	sort.Slice(v.Results, func(i, j int) bool { return v.Results[i].Kind < v.Results[j].Kind })
	if b.Total > 0 {
		v.Percent = int(b.Processed * 100 / b.Total)
	}
	return v
}

// describeFilter is a stored filter (JSON object) as "kind=LOCAL_ONLY, channel=…".
func describeFilter(raw []byte) string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return truncate(strings.Join(parts, ", "), 300)
}
