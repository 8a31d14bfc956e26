package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Findings: the filtered, paged findings table and its API twin.

func parseFindingFilter(q url.Values) (reconcile.FindingFilter, templates.FindingSearch, error) {
	fs := templates.FindingSearch{Kind: q.Get("kind"), State: q.Get("state"), Channel: strings.TrimSpace(q.Get("channel")),
		BillDate: strings.TrimSpace(q.Get("bill_date")), Run: strings.TrimSpace(q.Get("run")), Key: strings.TrimSpace(q.Get("key"))}
	f := reconcile.FindingFilter{Kind: reconcile.Kind(fs.Kind), State: reconcile.FindingState(fs.State), Channel: fs.Channel,
		BillDate: fs.BillDate, Limit: findingsShown}
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
	if f.BeforeID, err = parseBefore(q.Get("before")); err != nil {
		return f, fs, err
	}
	if l := q.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > 500 {
			return f, fs, inputErr("limit", "must be between 1 and 500")
		}
	}
	return f, fs, nil
}

func searchQuery(fs templates.FindingSearch) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"kind": fs.Kind, "state": fs.State, "channel": fs.Channel, "bill_date": fs.BillDate, "run": fs.Run,
		"key": fs.Key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
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

// findingRow is f for the findings table; names holds the names of the page's keys.
func findingRow(f reconcile.Finding, names map[int64]templates.KeyName) templates.FindingRow {
	row := templates.FindingRow{ID: f.ID, RunID: f.RunID, Channel: f.Channel, BillDate: f.BillDate, Kind: string(f.Kind),
		Subject: f.Subject, Detail: truncate(string(f.Detail), 400), State: string(f.State), Resolver: strp(f.Resolver),
		ReasonCode: strp(f.ReasonCode), Note: truncate(strp(f.Note), 300), CreatedAt: f.CreatedAt,
		CanRecover: f.Recoverable() == nil,
		Money:      findingMoney(f), KindHelp: kindHelp[f.Kind]}
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
		q := searchQuery(templates.FindingSearch{Kind: fs.Kind, State: st, Channel: fs.Channel, BillDate: fs.BillDate, Run: fs.Run,
			Key: fs.Key})
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

// findingsPage is GET /reconcile/findings: filters (kind, state, channel, bill_date, run, key
// by id), keyset paging (?before=ID), actions.
func (s *Server) findingsPage(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	f, fs, err := parseFindingFilter(q)
	v := templates.FindingsView{Search: fs, Kinds: kindNames(), CanAct: r.op.Role >= access.RoleOperator,
		Notice: findingNotices[q.Get("notice")], FirstURL: "/reconcile/findings?" + searchQuery(fs).Encode()}
	if err == nil {
		ctx, cancel := s.ctx(c)
		defer cancel()
		var rows []reconcile.Finding
		var next int64
		rows, next, err = s.listFindings(ctx, r.op, f)
		var names map[int64]templates.KeyName
		if err == nil {
			names, err = s.findingKeyNames(ctx, r.op, rows)
		}
		var counts map[reconcile.FindingState]int64
		if err == nil {
			counts, err = s.findingStateCounts(ctx, r.op, f)
		}
		if err == nil {
			v.Tabs = stateTabs(fs, counts)
			for _, row := range rows {
				v.Rows = append(v.Rows, findingRow(row, names))
			}
			if next != 0 {
				nq := searchQuery(fs)
				nq.Set("before", strconv.FormatInt(next, 10))
				v.NextURL = "/reconcile/findings?" + nq.Encode()
			}
		}
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		v.Error = pageMessage(c.Request.Context(), err)
		s.render(c, http.StatusBadRequest, templates.FindingsPage(chrome(r, "reconcile"), v))
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
	rows, next, err := s.listFindings(ctx, r.op, f)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []reconcile.Finding{}
	}
	out := gin.H{"findings": rows, "next_before": nil}
	if next != 0 {
		out["next_before"] = next
	}
	c.JSON(http.StatusOK, out)
	return nil
}
