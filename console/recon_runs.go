package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Recon runs: the runs list and a run's page, and their API twins.

func kindCounts(counts map[string]int64, runID int64) []templates.KindCount {
	out := make([]templates.KindCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, templates.KindCount{Kind: k, N: n,
			Href: fmt.Sprintf("/reconcile/findings?run=%d&kind=%s", runID, url.QueryEscape(k))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

func runRow(run reconcile.Run) templates.ReconRunRow {
	row := templates.ReconRunRow{ID: run.ID, Href: fmt.Sprintf("/reconcile/runs/%d", run.ID), Job: strp(run.JobName),
		Channel: run.Channel, BillDate: strp(run.BillDate), Status: string(run.Status), Actor: run.Actor,
		RowsParsed: run.RowsParsed, RowsLoaded: run.RowsLoaded, RowsMatched: run.RowsMatched, Counts: kindCounts(run.Counts, run.ID),
		AlreadyImported: run.AlreadyImported, KeysWithoutAccount: run.KeysWithoutAccount, Error: truncate(strp(run.Error), 300), StartedAt: run.StartedAt,
		FinishedAt: run.FinishedAt, Live: run.Status == reconcile.RunRunning || run.Status == reconcile.RunWaiting}
	if run.ErrorPhrase != nil {
		row.ErrorWhy = *run.ErrorPhrase
	}
	if run.StatementID != nil {
		row.Statement = errs.Phrasef("#%d", *run.StatementID)
		if run.StatementVer != nil {
			row.Statement = errs.Phrasef("#%d version %d", *run.StatementID, *run.StatementVer)
		}
	}
	return row
}

// runView is a run's page: the run and its number of findings.
func runView(run reconcile.Run) templates.ReconRunView {
	v := templates.ReconRunView{Run: runRow(run), FindingsURL: fmt.Sprintf("/reconcile/findings?run=%d", run.ID)}
	for _, n := range run.Counts {
		v.Findings += n
	}
	return v
}

func strp(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// reconRunsPage is GET /reconcile/runs?before=CURSOR (an id, or across cells a position in each;
// recon_runs_cells.go). Across cells a cell that does not answer is left out and named.
func (s *Server) reconRunsPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx)
	runs, next, err := s.listReconRuns(ctx, r.op, reconcile.RunFilter{Limit: reconRunsShown + 1}, c.Query("before"), reconRunsShown)
	if err != nil {
		return err
	}
	v := templates.ReconRunsView{Unavailable: missed.list()}
	if next != "" {
		v.NextURL = "/reconcile/runs?before=" + next
	}
	if v.Rows, err = s.runRows(ctx, runs); err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.ReconRunsPage(chrome(r, "reconcile"), v))
	return nil
}

// runRows are runs (listReconRuns') as a list of runs shows them: a run of a cell that is not the
// control cell names it, a control run's parts are under it, each naming its cell.
func (s *Server) runRows(ctx context.Context, runs []listedRun) ([]templates.ReconRunRow, error) {
	control := s.controlName()
	var rows []templates.ReconRunRow
	var channels []string
	for _, run := range runs {
		row := runRow(run.Run)
		if run.Cell != control {
			row.Cell = run.Cell
		}
		for _, p := range run.Parts {
			part := runRow(p.Run)
			part.Cell = p.Cell
			row.Parts = append(row.Parts, part)
		}
		rows = append(rows, row)
		channels = append(channels, run.Channel)
	}
	kinds, err := s.recon.ChannelKinds(ctx, channels)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].ChannelKind = kinds[rows[i].Channel]
		for j := range rows[i].Parts {
			rows[i].Parts[j].ChannelKind = rows[i].ChannelKind
		}
	}
	return rows, nil
}

// runParam reads the run named by the route's {id}: the page and the API read a run alike.
func (s *Server) runParam(c *gin.Context) (*reconcile.Run, error) {
	return paramIn(s, c, s.runIn)
}

// reconRunPage is GET /reconcile/runs/{id}; an htmx request gets the progress partial only.
func (s *Server) reconRunPage(c *gin.Context, r *request) error {
	run, err := s.runParam(c)
	if err != nil {
		return err
	}
	v := runView(*run)
	ctx, cancel := s.ctx(c)
	defer cancel()
	kinds, err := s.recon.ChannelKinds(ctx, []string{run.Channel})
	if err != nil {
		return err
	}
	v.Run.ChannelKind = kinds[run.Channel]
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.ReconRunProgress(v))
		return nil
	}
	if s.cells.cells != nil { // a control run's parts: its findings are theirs (recon_runs_cells.go)
		parts, err := s.partsOf(ctx, []int64{run.ID})
		if err != nil {
			return err
		}
		for _, p := range parts[run.ID] {
			row := runRow(p.Run)
			row.Cell, row.ChannelKind = p.Cell, v.Run.ChannelKind
			v.Parts = append(v.Parts, row)
		}
	}
	s.render(c, http.StatusOK, templates.ReconRunPage(chrome(r, "reconcile"), v))
	return nil
}

// apiReconRuns is GET /api/v1/reconcile/runs?job=NAME&before=CURSOR&limit=N. Across cells each
// run names its cell, a control run carries its cells' parts, and next_before is a position in
// each cell (a string; one database: the id, as it always was).
func (s *Server) apiReconRuns(c *gin.Context, r *request) error {
	limit := 50
	if l := c.Query("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 500 {
			return inputErr("limit", "must be between 1 and 500")
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	runs, next, err := s.listReconRuns(ctx, r.op, reconcile.RunFilter{Job: c.Query("job"), Limit: limit}, c.Query("before"), limit)
	if err != nil {
		return err
	}
	out := gin.H{"runs": []listedRun{}, "next_before": nil}
	if id, err := strconv.ParseInt(next, 10, 64); err == nil {
		out["next_before"] = id // one database: the id
	} else if next != "" {
		out["next_before"] = next
	}
	if len(runs) > 0 {
		out["runs"] = runs
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// apiReconRun is GET /api/v1/reconcile/runs/{id}: progress and counts per kind.
func (s *Server) apiReconRun(c *gin.Context, r *request) error {
	run, err := s.runParam(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, run)
	return nil
}
