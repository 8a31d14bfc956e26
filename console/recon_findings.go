package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Findings: the page opens grouped by kind × channel × bill day with counts and amounts, each
// group expanding into its findings; view=list is the filtered, paged table with selection for
// bulk actions and export. The API twin lists.

// findingQueryFields are the filter's query parameters, in the order links carry them.
var findingQueryFields = []string{"view", "kind", "state", "channel", "bill_date", "run", "key", "order_no", "currency", "amount_min", "amount_max"}

// parseFindingFilter reads the findings filter from a query (or a form): kind, state, channel,
// bill_date, run, key (id), order_no (exact, or a prefix ending in *), currency with amount_min
// and amount_max (major units, decimal), before (keyset) and limit. Errors: a field error.
func parseFindingFilter(q url.Values) (reconcile.FindingFilter, templates.FindingSearch, error) {
	fs := templates.FindingSearch{View: q.Get("view"), Kind: q.Get("kind"), State: q.Get("state"), Channel: strings.TrimSpace(q.Get("channel")),
		BillDate: strings.TrimSpace(q.Get("bill_date")), Run: strings.TrimSpace(q.Get("run")), Key: strings.TrimSpace(q.Get("key")),
		OrderNo: strings.TrimSpace(q.Get("order_no")), Currency: strings.ToUpper(strings.TrimSpace(q.Get("currency"))),
		AmountMin: strings.TrimSpace(q.Get("amount_min")), AmountMax: strings.TrimSpace(q.Get("amount_max"))}
	f := reconcile.FindingFilter{Kind: reconcile.Kind(fs.Kind), State: reconcile.FindingState(fs.State), Channel: fs.Channel,
		BillDate: fs.BillDate, OrderNo: fs.OrderNo, Currency: fs.Currency, Limit: findingsShown}
	switch fs.View {
	case "", "grouped", "list":
	default:
		return f, fs, inputErr("view", "is grouped or list")
	}
	if len(fs.Channel) > 64 {
		return f, fs, inputErr("channel", "is longer than 64 characters")
	}
	var err error
	if fs.Run != "" {
		if f.RunID, err = strconv.ParseInt(fs.Run, 10, 64); err != nil || f.RunID <= 0 {
			return f, fs, inputErr("run", "is not a run id")
		}
	}
	if fs.Key != "" {
		if f.KeyID, err = strconv.ParseInt(fs.Key, 10, 64); err != nil || f.KeyID <= 0 {
			return f, fs, inputErr("key", "is not a key id")
		}
	}
	if fs.AmountMin != "" || fs.AmountMax != "" {
		if !money.Known(fs.Currency) {
			return f, fs, inputErr("currency", "name the currency of the amount range")
		}
		for _, a := range []struct {
			field, v string
			to       **int64
		}{{"amount_min", fs.AmountMin, &f.AmountMin}, {"amount_max", fs.AmountMax, &f.AmountMax}} {
			if a.v == "" {
				continue
			}
			n, err := money.Parse(a.v, fs.Currency)
			if err != nil {
				return f, fs, inputErr(a.field, "is not an amount in %s (major units, e.g. 12.50)", fs.Currency)
			}
			*a.to = &n
		}
	}
	if before := q.Get("before"); isCellsCursor(before) { // a position in every cell (findings_cells.go)
		if _, err := parseCellsPos(before); err != nil {
			return f, fs, err
		}
	} else if f.BeforeID, err = parseBefore(before); err != nil {
		return f, fs, err
	}
	if l := q.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > 500 {
			return f, fs, inputErr("limit", "must be between 1 and 500")
		}
	}
	return f, fs, nil
}

// findingQuery is the filter as a query (view included when set); with extra pairs set on top.
func findingQuery(fs templates.FindingSearch, extra ...string) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"view": fs.View, "kind": fs.Kind, "state": fs.State, "channel": fs.Channel,
		"bill_date": fs.BillDate, "run": fs.Run, "key": fs.Key, "order_no": fs.OrderNo, "currency": fs.Currency,
		"amount_min": fs.AmountMin, "amount_max": fs.AmountMax} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			q.Del(extra[i])
		} else {
			q.Set(extra[i], extra[i+1])
		}
	}
	return q
}

// grouped says whether the page shows groups: by default, unless a filter beyond the state tab
// already narrows the findings (a group opened, a run, a key, an order number, an amount): a
// list is then what one wants.
func grouped(fs templates.FindingSearch) bool {
	narrowed := fs.Kind != "" || fs.Channel != "" || fs.BillDate != "" || fs.Run != "" || fs.Key != "" || fs.OrderNo != "" ||
		fs.Currency != "" || fs.AmountMin != "" || fs.AmountMax != ""
	return fs.View == "grouped" || (fs.View == "" && !narrowed)
}

// kindHelp says in words what each kind of finding means.
var kindHelp = map[reconcile.Kind]string{
	reconcile.LocalOnly:            "completed here, not on the channel's statement",
	reconcile.ChannelOnly:          "a success on the statement with no completed local key",
	reconcile.StatusMismatch:       "the channel and the key disagree on success",
	reconcile.AmountMismatch:       "both succeeded with different amounts",
	reconcile.CurrencyMismatch:     "both succeeded in different currencies",
	reconcile.DuplicateAtChannel:   "two successful channel transactions for one key: a double charge",
	reconcile.DuplicateInFile:      "one channel transaction on more than one line of the file",
	reconcile.ControlTotalMismatch: "the statement's rows do not add up to its totals; it was rejected",
	reconcile.SettlementMismatch:   "the settled total differs from the net of the rows",
	reconcile.FeeMismatch:          "the line's fee differs from the fee schedule",
}

// findingAmount is a finding's amount for people ("1234.50 CNY"), "" when it has none.
func findingAmount(f reconcile.Finding) string {
	if f.AmountMinor == nil || f.Currency == nil {
		return ""
	}
	return money.Display(*f.AmountMinor, *f.Currency)
}

// findingRow is f for the findings table; names holds the names of the page's keys.
func findingRow(f reconcile.Finding, names map[int64]templates.KeyName) templates.FindingRow {
	row := templates.FindingRow{ID: f.ID, RunID: f.RunID, Channel: f.Channel, BillDate: f.BillDate, Kind: string(f.Kind),
		Subject: f.Subject, Detail: truncate(string(f.Detail), 400), State: string(f.State), Resolver: strp(f.Resolver),
		ReasonCode: strp(f.ReasonCode), ReasonLabel: reconcile.ReasonLabel(strp(f.ReasonCode)), Note: truncate(strp(f.Note), 300),
		CreatedAt: f.CreatedAt, CanRecover: f.Recoverable() == nil, OrderNo: strp(f.MerchantOrderNo), Amount: findingAmount(f),
		Money: findingMoney(f), KindHelp: kindHelp[f.Kind]}
	row.ChannelSide, row.LocalSide, row.Line = findingSides(f)
	if row.Line != 0 {
		row.LineHref = fmt.Sprintf("/reconcile/runs/%d/line?n=%d", f.RunID, row.Line)
	}
	if f.KeyID != nil {
		row.KeyID, row.KeyHref = *f.KeyID, fmt.Sprintf("/keys/%d", *f.KeyID)
		row.Key = names[*f.KeyID]
		row.Key.ID = *f.KeyID
	}
	return row
}

// findingChannelKinds names the channel of each row by its account's kind (one read for all).
func (s *Server) findingChannelKinds(ctx context.Context, rows []templates.FindingRow) error {
	channels := make([]string, len(rows))
	for i, row := range rows {
		channels[i] = row.Channel
	}
	kinds, err := s.recon.ChannelKinds(ctx, channels)
	for i := range rows {
		rows[i].ChannelKind = kinds[rows[i].Channel]
	}
	return err
}

// findingKeyNames names the keys of a page of findings for op.
func (s *Server) findingKeyNames(ctx context.Context, op *access.Operator, rows []reconcile.Finding) (map[int64]templates.KeyName, error) {
	var ids []int64
	for _, f := range rows {
		if f.KeyID != nil {
			ids = append(ids, *f.KeyID)
		}
	}
	return s.keyNames(ctx, op, ids)
}

// stateTabs are the findings page's tabs: every state with its count under the other filters.
func stateTabs(fs templates.FindingSearch, counts map[reconcile.FindingState]int64) []templates.StateTab {
	var tabs []templates.StateTab
	var all int64
	for _, st := range []reconcile.FindingState{reconcile.FindingOpen, reconcile.FindingResolved, reconcile.FindingIgnored} {
		all += counts[st]
	}
	for _, st := range []string{"open", "resolved", "ignored", ""} {
		q := findingQuery(fs, "state", st)
		tab := templates.StateTab{State: st, Label: st, N: counts[reconcile.FindingState(st)], Current: fs.State == st,
			Href: "/reconcile/findings?" + q.Encode()}
		if st == "" {
			tab.Label, tab.N = "all", all
		}
		tabs = append(tabs, tab)
	}
	return tabs
}

func kindNames() []string {
	out := make([]string, len(reconcile.Kinds))
	for i, k := range reconcile.Kinds {
		out[i] = string(k)
	}
	return out
}

// maxGroupsShown bounds the groups the page lists (narrow the filter for the rest).
const maxGroupsShown = 200

// findingGroups folds counts (one state) into the page's groups: kind × channel × bill date,
// with the amounts per currency, newest bill date first.
func findingGroups(fs templates.FindingSearch, counts []reconcile.FindingCount, state reconcile.FindingState) ([]templates.FindingGroup, bool) {
	type gk struct{ kind, channel, date string }
	byKey := map[gk]*templates.FindingGroup{}
	amounts := map[gk]map[string]int64{}
	var order []gk
	for _, c := range counts {
		if state != "" && c.State != state {
			continue
		}
		k := gk{string(c.Kind), c.Channel, c.BillDate}
		g, ok := byKey[k]
		if !ok {
			g = &templates.FindingGroup{Kind: k.kind, KindHelp: kindHelp[c.Kind], Channel: k.channel, BillDate: k.date}
			byKey[k], amounts[k] = g, map[string]int64{}
			order = append(order, k)
		}
		g.N += c.N
		if c.Currency != "" {
			amounts[k][c.Currency] += c.AmountMinor
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.date != b.date {
			return a.date > b.date
		}
		if a.channel != b.channel {
			return a.channel < b.channel
		}
		return a.kind < b.kind
	})
	more := len(order) > maxGroupsShown
	if more {
		order = order[:maxGroupsShown]
	}
	out := make([]templates.FindingGroup, 0, len(order))
	for i, k := range order {
		g := byKey[k]
		var curs []string
		for c := range amounts[k] {
			curs = append(curs, c)
		}
		sort.Strings(curs)
		for _, c := range curs {
			g.Amounts = append(g.Amounts, money.Display(amounts[k][c], c))
		}
		list := findingQuery(fs, "view", "list", "kind", k.kind, "channel", k.channel, "bill_date", k.date)
		g.Href = "/reconcile/findings?" + list.Encode()
		g.RowsHref = g.Href + "&limit=" + strconv.Itoa(groupRowsShown)
		g.ID = "group-" + strconv.Itoa(i+1)
		out = append(out, *g)
	}
	return out, more
}

// groupRowsShown is how many findings an opened group shows (the rest: its list).
const groupRowsShown = 20

// findingsView builds the findings page for op: the tabs, and the groups or a page of rows.
// The one place the page, the group's rows (htmx) and a refused form's page come from.
func (s *Server) findingsView(ctx context.Context, r *request, q url.Values, form *templates.FindingForm) (templates.FindingsView, error) {
	f, fs, err := parseFindingFilter(q)
	v := templates.FindingsView{Search: fs, Kinds: kindNames(), CanAct: r.op.Role >= access.RoleOperator,
		Notice: findingNotices[q.Get("notice")], Form: form, Reasons: findingReasons(), Grouped: grouped(fs),
		Currencies: money.Codes()}
	v.FirstURL = "/reconcile/findings?" + findingQuery(fs).Encode()
	if err != nil {
		return v, err
	}
	counts, err := s.findingStateCounts(ctx, r.op, f)
	if err != nil {
		return v, err
	}
	v.Tabs = stateTabs(fs, counts)
	v.Matching = counts[f.State]
	if f.State == "" {
		for _, n := range counts {
			v.Matching += n
		}
	}
	exportQ := findingQuery(fs, "view", "")
	v.ExportCSV = "/reconcile/findings/export?" + withParam(exportQ, "format", "csv").Encode()
	v.ExportXLSX = "/reconcile/findings/export?" + withParam(exportQ, "format", "xlsx").Encode()
	v.BulkFields = formFields(findingQuery(fs, "view", ""))
	if v.Grouped {
		all, more, err := s.findingCounts(ctx, r.op, f)
		if err != nil {
			return v, err
		}
		v.Groups, v.GroupsMore = findingGroups(fs, all, f.State)
		v.GroupsMore = v.GroupsMore || more
		channels := make([]string, len(v.Groups))
		for i, g := range v.Groups {
			channels[i] = g.Channel
		}
		kinds, err := s.recon.ChannelKinds(ctx, channels)
		for i := range v.Groups {
			v.Groups[i].ChannelKind = kinds[v.Groups[i].Channel]
		}
		return v, err
	}
	rows, next, err := s.listFindings(ctx, r.op, f, q.Get("before"))
	if err != nil {
		return v, err
	}
	names, err := s.findingKeyNames(ctx, r.op, rows)
	if err != nil {
		return v, err
	}
	for _, row := range rows {
		v.Rows = append(v.Rows, findingRow(row, names))
	}
	if err := s.findingChannelKinds(ctx, v.Rows); err != nil {
		return v, err
	}
	if next != "" {
		v.NextURL = "/reconcile/findings?" + findingQuery(fs, "before", next).Encode()
	}
	return v, nil
}

func withParam(q url.Values, k, v string) url.Values {
	out := url.Values{}
	for key, vals := range q {
		out[key] = vals
	}
	out.Set(k, v)
	return out
}

// formFields are q's pairs as hidden fields, in a fixed order.
func formFields(q url.Values) []templates.Field {
	var out []templates.Field
	for _, k := range findingQueryFields {
		if v := q.Get(k); v != "" {
			out = append(out, templates.Field{Name: k, Value: v})
		}
	}
	return out
}

// findingReasons is the vocabulary of each action, for the forms.
func findingReasons() map[string][]templates.Reason {
	out := map[string][]templates.Reason{}
	for _, a := range []string{reconcile.ActionResolve, reconcile.ActionIgnore, reconcile.ActionRecover, reconcile.ActionReopen} {
		for _, r := range reconcile.Reasons(a) {
			out[a] = append(out[a], templates.Reason{Code: r.Code, Label: r.Label})
		}
	}
	return out
}

// findingsPage is GET /reconcile/findings: the groups (default) or view=list, the filters,
// keyset paging (?before=ID), the actions. From htmx (a group opened) it answers the rows alone.
func (s *Server) findingsPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' findings, and its name
	v, err := s.findingsView(ctx, r, c.Request.URL.Query(), nil)
	v.Unavailable = missed.list()
	if err != nil {
		if !isFormError(err) {
			return err
		}
		v.Error = pageMessage(c.Request.Context(), err)
		s.render(c, http.StatusBadRequest, templates.FindingsPage(chrome(r, "reconcile"), v))
		return nil
	}
	if isHTMX(c) && !v.Grouped {
		s.render(c, http.StatusOK, templates.FindingRows(chrome(r, "reconcile"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.FindingsPage(chrome(r, "reconcile"), v))
	return nil
}

// apiFindings is GET /api/v1/reconcile/findings with the page's filters; next page: ?before=.
func (s *Server) apiFindings(c *gin.Context, r *request) error {
	f, _, err := parseFindingFilter(c.Request.URL.Query())
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, next, err := s.listFindings(ctx, r.op, f, c.Query("before"))
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []reconcile.Finding{}
	}
	out := gin.H{"findings": rows, "next_before": nil}
	if id, err := strconv.ParseInt(next, 10, 64); err == nil {
		out["next_before"] = id // one database: the id, as it always was
	} else if next != "" {
		out["next_before"] = next // cells: a position in each
	}
	c.JSON(http.StatusOK, out)
	return nil
}
