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
	"github.com/idemops/idemops/errs"
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
	// upToCells is UpTo across cells: the newest finding the preview saw in each (nil: none
	// given, or one cell).
	upToCells cellsPos
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

// previewFindingsBulk is what a bulk action would act on (reconcile.PreviewBulk in op's scope),
// and the newest finding it saw in each cell (nil with one cell: the preview's UpTo says it).
// A preview without an action yet (the page's first step) previews "resolve" with no reason:
// counts do not depend on them. Across cells each cell previews its findings and the counts,
// amounts and sample are the sums and the merge; the four-eyes threshold and the cap apply to
// the sum.
func (s *Server) previewFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (*reconcile.BulkPreview, cellsPos, error) {
	if op.Role < access.RoleOperator {
		return nil, nil, ErrForbidden
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.QueryTimeout)
	defer cancel()
	req, err := s.bulkRequest(ctx, op, ip, in)
	if err != nil {
		return nil, nil, err
	}
	in2 := s.cells.everywhere()
	got, err := eachCell(ctx, in2, func(ctx context.Context, c scopedCell) (*reconcile.BulkPreview, error) {
		return c.recon.PreviewBulk(ctx, req)
	})
	if err != nil || len(got) == 1 {
		return got[0], nil, err
	}
	p := *got[0]
	p.Count, p.Amounts, p.ByKind, p.UpTo = 0, map[string]int64{}, map[reconcile.Kind]int64{}, 0
	upTo := cellsPos{}
	names := make([]string, len(in2))
	samples := make([][]reconcile.Finding, len(in2))
	for i, c := range got {
		names[i], samples[i] = in2[i].name, c.Sample
		p.Count += c.Count
		for cur, n := range c.Amounts {
			p.Amounts[cur] += n
		}
		for k, n := range c.ByKind {
			p.ByKind[k] += n
		}
		if c.UpTo != 0 {
			upTo[in2[i].name] = c.UpTo
		}
	}
	p.Sample, _ = mergeNewest(names, samples, nil, bulkSampleShown, 0, newerFinding, findingID)
	if p.Sample == nil {
		p.Sample = []reconcile.Finding{}
	}
	p.NeedsApproval = p.Count > int64(p.ApprovalAbove)
	p.TooMany = p.Count > int64(p.Cap)
	return &p, upTo, nil
}

// bulkSampleShown is how many findings a preview across cells shows (as one cell's does).
const bulkSampleShown = 10

// startFindingsBulk starts a bulk action (reconcile.StartBulk in op's scope, up to the newest
// finding its preview saw). Across cells it starts one run in each cell holding findings of it
// (up to the newest that cell's preview saw; a cell the preview saw none in is left alone), all
// waiting for a second operator when together they hold more than the threshold; the runs are
// each cell daemon's to work, and a second operator approves each. A cell whose start fails
// does not undo the others'; the error names it.
func (s *Server) startFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) ([]*reconcile.BulkRun, error) {
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.QueryTimeout)
	defer cancel()
	req, err := s.bulkRequest(ctx, op, ip, in)
	if err != nil {
		return nil, err
	}
	if s.cells.cells == nil {
		run, err := s.recon.StartBulk(ctx, req, in.UpTo)
		if err != nil {
			return nil, err
		}
		return []*reconcile.BulkRun{run}, nil
	}
	if in.UpTo != 0 {
		return nil, inputErr("upto", "across cells is the newest finding the preview saw in each cell (its \"upto\"): preview again")
	}
	// What each cell holds of it, up to what its preview saw: the sum decides four eyes and the cap.
	type part struct {
		c    scopedCell
		upTo int64
		n    int64
	}
	var parts []part
	var total int64
	cap := s.recon.Config().BulkCap
	for _, c := range s.cells.everywhere() {
		upTo := in.upToCells[c.name]
		if in.upToCells != nil && upTo == 0 {
			continue // the preview saw none of its findings here
		}
		f := req.Filter
		f.State, f.BeforeID, f.Limit = reconcile.FindingOpen, 0, 0
		if upTo != 0 {
			f.UpTo = upTo
		}
		if !req.Selected {
			f.IDs = nil
		}
		n, err := c.recon.CountMatching(ctx, f, cap)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.name, err)
		}
		if n > 0 {
			parts, total = append(parts, part{c, upTo, n}), total+n
		}
	}
	switch {
	case len(parts) == 0:
		return nil, errs.Refusedf("no open finding matches: there is nothing to %s", req.Action)
	case total > int64(cap):
		return nil, errs.Refusedf("more than %d findings match; one bulk run takes at most %d: narrow the filter", cap, cap)
	}
	req.FourEyes = len(parts) > 1 && total > int64(s.recon.Config().BulkApprovalAbove)
	var runs []*reconcile.BulkRun
	for _, pt := range parts {
		run, err := pt.c.recon.StartBulk(ctx, req, pt.upTo)
		if err != nil {
			return runs, fmt.Errorf("cell %s: %w", pt.c.name, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// bulkRunIn reads bulk run of findings id with the cell it lives in (the route's scope check
// passed).
func (s *Server) bulkRunIn(ctx context.Context, id int64) (*reconcile.BulkRun, *cell, error) {
	if s.cells.cells == nil {
		run, err := s.recon.GetBulkRun(ctx, id)
		return run, s.cells.all[0], err
	}
	return stayIn(ctx, s.cells, func(ctx context.Context, c *cell) (*reconcile.BulkRun, error) { return c.recon.GetBulkRun(ctx, id) },
		fmt.Errorf("bulk run %d: %w", id, ErrNotFound))
}

// decideFindingsBulk approves or rejects bulk run id as op (the route's scope check passed:
// op covers its findings' tenants), in the run's cell.
func (s *Server) decideFindingsBulk(ctx context.Context, op *access.Operator, ip string, id int64, approve bool) (*reconcile.BulkRun, error) {
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	_, c, err := s.bulkRunIn(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.recon.DecideBulk(ctx, id, reconcile.BulkOperator{ID: op.ID, Name: op.Name, IP: ip}, approve)
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
	if u := form.Get("upto"); isCellsCursor(u) {
		p, err := parseCellsPos(u)
		if err != nil {
			return in, inputErr("upto", "is not the newest findings a preview saw")
		}
		in.upToCells = p
	} else if u != "" {
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
func (s *Server) bulkPreviewView(ctx context.Context, r *request, in FindingsBulkInput, p *reconcile.BulkPreview, upTo cellsPos,
	form *templates.FindingForm) (templates.FindingsBulkPreviewView, error) {
	v := templates.FindingsBulkPreviewView{Count: p.Count, Amounts: amountsText(p.Amounts), UpTo: strconv.FormatInt(p.UpTo, 10),
		NeedsApproval: p.NeedsApproval, ApprovalAbove: p.ApprovalAbove, TooMany: p.TooMany, Cap: p.Cap, Selected: in.Selected,
		Reasons: findingReasons(), Form: form, Action: in.Action}
	for k, n := range p.ByKind {
		v.ByKind = append(v.ByKind, templates.KindCount{Kind: string(k), N: n})
	}
	sort.Slice(v.ByKind, func(i, j int) bool { return v.ByKind[i].Kind < v.ByKind[j].Kind })
	if upTo != nil {
		v.UpTo = upTo.String()
	}
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
