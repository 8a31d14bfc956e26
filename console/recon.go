package console

import (
	"context"
	"fmt"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
)

// The reconciliation pages drive a reconcile.Reconciler built on the console's own claim store,
// operations and audit log, so a finding's resolution is recorded in the same hash chain as
// every other console action.

// operationsFunc adapts Config.Operations to reconcile.Operations.
type operationsFunc func(name string) (claim.Operation, bool)

func (f operationsFunc) Get(name string) (claim.Operation, bool) { return f(name) }

// keyTenants returns the tenant of each of ids that still exists.
func (s *Server) keyTenants(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := keys.NamesOf(ctx, s.db, ids)
	if err != nil {
		return nil, fmt.Errorf("finding keys: %w", err)
	}
	for _, r := range rows {
		out[r.ID] = r.Tenant
	}
	return out, nil
}

// findingVisibility is what op may see of the findings, by the one scope decision
// (access.Decide, as getFinding's Scope.Check decides for one finding): findings about keys of
// each of its tenants, and findings about a statement itself of each channel account whose
// tenants it covers. nil for an operator of every tenant: everything.
func (s *Server) findingVisibility(ctx context.Context, op *access.Operator) (*reconcile.Visibility, error) {
	if op.SeesAllTenants() {
		return nil, nil
	}
	v := &reconcile.Visibility{Tenants: []string{}, Channels: []string{}}
	for _, t := range op.Tenants {
		if access.Decide(op, access.ObjFinding, "", []string{t}, false) == nil {
			v.Tenants = append(v.Tenants, t)
		}
	}
	accounts, err := s.recon.ListChannelAccounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range accounts {
		if access.Decide(op, access.ObjFinding, "", a.Tenants, false) == nil {
			v.Channels = append(v.Channels, a.Channel)
		}
	}
	return v, nil
}

// visibleTo is f limited to what op may see, as every read of findings asks each cell. Across
// cells a run's findings are also those of its parts: a control cell's run found nothing itself,
// its cells' parts of it did (recon_runs_cells.go), so its counts' links and its page's
// "Findings of this run" lead to them in every cell.
func (s *Server) visibleTo(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) (reconcile.FindingFilter, error) {
	v, err := s.findingVisibility(ctx, op)
	f.Visible = v
	f.RunParts = s.cells.cells != nil
	return f, err
}

// listFindings returns up to f.Limit findings op may see, and the cursor of the next page (""
// none): before is the page's cursor as given (one id, or a position in every cell; see
// findings_cells.go), already checked by parseFindingFilter, which put one id in f.BeforeID.
// Every cell is asked at once and their lists merged (pageAcrossCells); with one cell, its list.
func (s *Server) listFindings(ctx context.Context, op *access.Operator, f reconcile.FindingFilter, before string) ([]reconcile.Finding, string, error) {
	f, err := s.visibleTo(ctx, op, f)
	if err != nil {
		return nil, "", err
	}
	if !isCellsCursor(before) {
		before = "" // f.BeforeID holds it (FindingsFor: with no cursor)
	}
	return pageAcrossCells(ctx, s.cells, before, f.Limit+1, f.Limit, reconcile.MaxFindingsListed,
		func(ctx context.Context, c scopedCell, beforeID int64, limit int) ([]reconcile.Finding, error) {
			f := f
			if beforeID != 0 {
				f.BeforeID = beforeID
			}
			f.Limit = limit
			return c.recon.ListFindings(ctx, f)
		}, newerFinding, findingID)
}

// getFinding reads one finding op may see, in the cell that has it; one of a tenant op may not
// see is ErrNotFound.
func (s *Server) getFinding(ctx context.Context, op *access.Operator, id int64) (*reconcile.Finding, error) {
	f, _, err := s.findingIn(ctx, op, id)
	return f, err
}

// findingCounts counts the findings matching f (in its state) that op may see per kind, channel
// and bill date with their amounts per currency: the newest maxGroupsShown groups, and whether
// there are more (reconcile.GroupFindings). Across cells every cell's newest groups are counted
// together: a group among the newest of all is among the newest of each cell that has it, so
// its sums are whole.
func (s *Server) findingCounts(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) ([]reconcile.FindingCount, bool, error) {
	f, err := s.visibleTo(ctx, op, f)
	if err != nil {
		return nil, false, err
	}
	type groups struct {
		rows []reconcile.FindingCount
		more bool
	}
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) (groups, error) {
		rows, more, err := c.recon.GroupFindings(ctx, f, maxGroupsShown)
		return groups{rows, more}, err
	})
	if err != nil {
		return nil, false, err
	}
	var rows []reconcile.FindingCount
	more := false
	for _, g := range got {
		rows, more = append(rows, g.rows...), more || g.more
	}
	return rows, more, nil
}

// findingStateCounts counts the findings matching f (whatever its state) that op may see, per
// state, summed over the cells: the findings page's tabs and the dashboard's open findings.
func (s *Server) findingStateCounts(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) (map[reconcile.FindingState]int64, error) {
	f, err := s.visibleTo(ctx, op, f)
	if err != nil {
		return nil, err
	}
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) (map[reconcile.FindingState]int64, error) {
		return c.recon.CountFindingsByState(ctx, f)
	})
	if err != nil || len(got) == 1 {
		return got[0], err
	}
	out := map[reconcile.FindingState]int64{}
	for _, m := range got {
		for st, n := range m {
			out[st] += n
		}
	}
	return out, nil
}

var reconNotices = map[string]string{
	"created":  "Recon job created; the daemon runs it on its schedule.",
	"updated":  "Recon job saved.",
	"enabled":  "Recon job enabled.",
	"disabled": "Recon job disabled: its schedule is paused.",
	"run":      "Run requested: the daemon's leader starts it at its next poll.",
	"channel":  "Channel account's tenants saved.",
}

var findingNotices = map[string]string{
	"resolved":  "Finding resolved.",
	"ignored":   "Finding ignored.",
	"recovered": "Recover done: the key was completed from the channel's document and the finding resolved.",
	"reopened":  "Finding reopened.",
}

const (
	reconRunsShown     = 30
	jobReconRunsShown  = 10 // a recon job's page: its recent runs
	findingsShown      = 50
	nextRunsShown      = 5
	uploadTimeout      = 15 * time.Minute
	reconStatementFile = "statement"
)

func (s *Server) reconActor(r *request) string { return r.op.Name }
