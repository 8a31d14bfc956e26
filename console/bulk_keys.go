package console

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/replay"
)

// Bulk replays across tenant cells: a run, its items and the daemon job that works it live in
// one database, so a bulk replay of keys in several cells is one run per cell, each in its keys'
// own cell and worked by that cell's daemon, through that cell's replay workflow. The preview
// chooses the keys across the cells (the first BulkCap of the search's one order, or the keys
// picked), previews each cell's part there, and carries the parts' plans and tokens together:
// "a=PLAN b=PLAN" and "a=TOKEN b=TOKEN" (a plan never holds a space: its filter is a URL
// query). Each part's token is its workflow's HMAC of that part, so nothing in it can be
// altered, followed by the console's HMAC of the cell's name with it ("TOKEN.CELLMAC"), so a
// part cannot be started in another cell than the one that previewed it. With one cell: one
// plan and one token, as always.

// cellSelection is the part of a bulk replay's keys one cell holds.
type cellSelection struct {
	c   *cell
	sel replay.BulkSelection
}

// bulkChoice is the keys of a bulk replay, each cell's part apart: capped says more matched
// than BulkCap (across cells; with one cell the part holds the one more key and the workflow's
// preview caps it), order is the keys' ids in the search's one order.
type bulkChoice struct {
	parts  []cellSelection
	capped bool
	order  []int64
}

// countMatching counts the keys of a search up to BulkCap (more says more match): the "N" of
// "select all N matching this filter", over op's cells.
func (s *Server) countMatching(ctx context.Context, op *access.Operator, f KeyFilter) (n int, more bool, err error) {
	got, err := eachCell(ctx, s.cells.For(s.keyScope(op), f.Tenant), func(ctx context.Context, c scopedCell) ([]int64, error) {
		return keys.MatchingIDs(ctx, c.db, c.held, f, s.cfg.BulkCap)
	})
	if err != nil {
		return 0, false, err
	}
	for _, ids := range got {
		n += len(ids)
	}
	if n > s.cfg.BulkCap {
		return s.cfg.BulkCap, true, nil
	}
	return n, false, nil
}

// bulkKeys chooses the keys of a bulk replay: the ids picked, else everything the search
// matches up to BulkCap (one more says more matched), in the search's order, each cell's part
// apart. With one cell: one part, with its one more key (the workflow's preview caps it);
// across cells the parts hold the first BulkCap keys and capped says more matched.
func (s *Server) bulkKeys(ctx context.Context, op *access.Operator, f KeyFilter, ids []int64) (bulkChoice, error) {
	var ch bulkChoice
	sel := replay.BulkSelection{Filter: f.Query().Encode(), Selected: len(ids) > 0}
	if len(ids) > s.cfg.BulkCap {
		return ch, inputErr("id", "%d keys selected; a bulk replay takes at most %d", len(ids), s.cfg.BulkCap)
	}
	in := s.cells.For(s.keyScope(op), "")
	if len(ids) == 0 {
		in = s.cells.For(s.keyScope(op), f.Tenant)
	}
	got, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) ([]claim.Key, error) {
		scope := c.held
		if s.cells.cells == nil {
			scope = s.keyScope(op)
		}
		if len(ids) > 0 {
			return keys.Selected(ctx, c.db, scope, ids)
		}
		return keys.Matching(ctx, c.db, scope, f, s.cfg.BulkCap)
	})
	if err != nil {
		return ch, err
	}
	if len(got) == 1 {
		sel.Keys = got[0]
		ch.parts = []cellSelection{{in[0].cell, sel}}
		return ch, noBulkKeys(sel)
	}
	// The search's one order across the cells, at most BulkCap+1 keys (one more: capped).
	all := flatten(got)
	slices.SortStableFunc(all, func(a, b fromCell[claim.Key]) int {
		return cmp.Or(b.v.CreatedAt.Compare(a.v.CreatedAt), cmp.Compare(b.v.ID, a.v.ID))
	})
	if len(all) == 0 {
		return ch, noBulkKeys(sel)
	}
	ch.capped = len(all) > s.cfg.BulkCap
	all = all[:min(len(all), s.cfg.BulkCap)]
	cellParts := make([]replay.BulkSelection, len(in))
	for _, p := range all {
		cellParts[p.cell].Keys = append(cellParts[p.cell].Keys, p.v)
		ch.order = append(ch.order, p.v.ID)
	}
	for i, p := range cellParts {
		if len(p.Keys) > 0 {
			p.Filter, p.Selected = sel.Filter, sel.Selected
			ch.parts = append(ch.parts, cellSelection{in[i].cell, p})
		}
	}
	return ch, nil
}

// noBulkKeys refuses a selection without keys, saying why.
func noBulkKeys(sel replay.BulkSelection) error {
	switch {
	case len(sel.Keys) > 0:
		return nil
	case sel.Selected:
		return inputErr("id", "none of the selected keys is visible to you")
	}
	return inputErr("filter", "no key matches this search")
}

// previewBulkIn previews each cell's part of a bulk replay in that cell and puts them together:
// the items in the search's order, the counts summed, the plans and tokens joined by cell (one
// cell: its preview as it is).
func (s *Server) previewBulkIn(ctx context.Context, a replay.Actor, ch bulkChoice) (*replay.BulkPlan, error) {
	parts := ch.parts
	if s.cells.cells == nil {
		return parts[0].c.replays.PreviewBulk(ctx, a, parts[0].sel)
	}
	plans := make([]*replay.BulkPlan, len(parts))
	for i, p := range parts {
		var err error
		if plans[i], err = p.c.replays.PreviewBulk(ctx, a, p.sel); err != nil {
			return nil, fmt.Errorf("cell %s: %w", p.c.name, err)
		}
	}
	out := &replay.BulkPlan{Filter: plans[0].Filter, Selected: plans[0].Selected, Capped: ch.capped,
		Counts: replay.BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}, Expires: plans[0].Expires}
	var planParts, tokenParts []string
	for i, p := range plans {
		out.Items = append(out.Items, p.Items...)
		out.Total += p.Total
		out.Capped = out.Capped || p.Capped // one cell's part of BulkCap+1 keys: its preview capped it
		for k, n := range p.Counts.ByState {
			out.Counts.ByState[k] += n
		}
		for k, n := range p.Counts.ByOutcome {
			out.Counts.ByOutcome[k] += n
		}
		if p.Expires.Before(out.Expires) {
			out.Expires = p.Expires
		}
		planParts = append(planParts, parts[i].c.name+"="+p.Plan)
		tokenParts = append(tokenParts, parts[i].c.name+"="+p.Token+"."+s.cellMAC(parts[i].c.name, p.Plan))
	}
	at := make(map[int64]int, len(ch.order))
	for i, id := range ch.order {
		at[id] = i
	}
	slices.SortStableFunc(out.Items, func(x, y replay.BulkItem) int { return cmp.Compare(at[x.KeyID], at[y.KeyID]) })
	for i := range out.Items {
		out.Items[i].Seq = i + 1
	}
	out.Plan, out.Token = strings.Join(planParts, " "), strings.Join(tokenParts, " ")
	return out, nil
}

// startBulkIn starts a previewed bulk replay: with one cell, the plan; across cells, each part
// in its cell (a run each). A part whose start fails does not undo the runs started before it;
// the error names its cell.
func (s *Server) startBulkIn(ctx context.Context, a replay.Actor, plan, token, reason string) ([]*replay.BulkRun, error) {
	if s.cells.cells == nil {
		run, err := s.replays.StartBulk(ctx, a, plan, token, reason)
		if err != nil {
			return nil, err
		}
		return []*replay.BulkRun{run}, nil
	}
	plans, tokens := splitParts(plan), splitParts(token)
	if len(plans) == 0 || len(plans) != len(tokens) {
		return nil, inputErr("plan", "cannot be read; preview the bulk replay again")
	}
	var runs []*replay.BulkRun
	for _, p := range plans {
		c, tok := s.cells.named(p.name), tokenOf(tokens, p.name)
		tok, mac, _ := strings.Cut(tok, ".")
		if c == nil || tok == "" || !hmac.Equal([]byte(mac), []byte(s.cellMAC(p.name, p.value))) {
			return runs, inputErr("token", "is not a bulk preview of yours or was altered; preview the bulk replay again")
		}
		run, err := c.replays.StartBulk(ctx, a, p.value, tok, reason)
		if err != nil {
			if len(runs) > 0 {
				return runs, fmt.Errorf("cell %s: %w", c.name, err)
			}
			return nil, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// part is one cell's part of a joined plan or token.
type part struct{ name, value string }

// splitParts reads "a=X b=Y".
func splitParts(s string) []part {
	var out []part
	for f := range strings.FieldsSeq(s) {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" || value == "" {
			return nil
		}
		out = append(out, part{name, value})
	}
	return out
}

func tokenOf(tokens []part, name string) string {
	for _, t := range tokens {
		if t.name == name {
			return t.value
		}
	}
	return ""
}

// cellMAC binds one cell's part of a bulk replay plan to that cell's name.
func (s *Server) cellMAC(cell, plan string) string {
	m := hmac.New(sha256.New, []byte(s.cfg.DigestSecret))
	fmt.Fprintf(m, "bulk-cell|%s|%s", cell, plan)
	return hex.EncodeToString(m.Sum(nil))
}
