package console

import (
	"context"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// Recon runs across tenant cells. A recon job (or an upload) runs in the control cell; its
// statement is imported and matched in every cell holding one of its channel account's tenants,
// each in a run of its own that names the control's run (reconcile, cells.go there). The runs
// list shows what an operator started: the control's run, with the summed counts and the overall
// status, and under it its parts — which cell did what, and the way to each cell's findings,
// which live in the cells. A part is not listed beside its run: it would count the statement's
// findings twice. A run of a cell's own (made before it was a cell, or imported into it alone)
// is listed like the control's.
//
// Each cell lists its runs newest first by id; the lists are merged by (started_at, id) with a
// position in each cell as the cursor, as the findings are (findings_cells.go).

// listedRun is a recon run as the runs list gives it: with its cell and, for a run of the
// control cell across cells, the cells' parts of it.
type listedRun struct {
	reconcile.Run
	// Cell is the cell holding the run ("" with one database).
	Cell  string      `json:"cell,omitempty"`
	Parts []listedRun `json:"parts,omitempty"`
}

// newerRun orders runs newest first by (started_at, id): the merge's order.
func newerRun(a, b *reconcile.Run) bool {
	if !a.StartedAt.Equal(b.StartedAt) {
		return a.StartedAt.After(b.StartedAt)
	}
	return a.ID > b.ID
}

// listReconRuns lists the recon runs f selects that op may see, newest first, from before (the
// page's cursor: "" for the newest, one id, or a position in every cell), shown of them, and
// the cursor of the next page ("" none): pageAcrossCells reading f.Limit rows. Across cells:
// every cell's runs that are no other run's part, and each control run's parts.
func (s *Server) listReconRuns(ctx context.Context, op *access.Operator, f reconcile.RunFilter, before string, shown int) ([]listedRun, string, error) {
	f.Whole = s.cells.cells != nil
	runs, next, err := pageAcrossCells(ctx, s.cells, before, f.Limit, shown, reconcile.MaxRunsListed,
		func(ctx context.Context, c scopedCell, beforeID int64, limit int) ([]listedRun, error) {
			f := f
			f.BeforeID, f.Limit = beforeID, limit
			return c.runs(ctx, f)
		},
		func(a, b *listedRun) bool { return newerRun(&a.Run, &b.Run) }, func(r *listedRun) int64 { return r.ID })
	if err != nil {
		return nil, "", err
	}
	if runs, err = visibleBy(ctx, op, runs, access.ObjReconRun, s.channelTenants, func(r listedRun) (string, string) { return r.Channel, "" }); err != nil {
		return nil, "", err
	}
	if s.cells.cells != nil {
		err = s.withParts(ctx, runs)
	}
	return runs, next, err
}

// runs lists the recon runs f selects in c, each naming c.
func (c scopedCell) runs(ctx context.Context, f reconcile.RunFilter) ([]listedRun, error) {
	runs, err := c.recon.ListRuns(ctx, f)
	out := make([]listedRun, len(runs))
	for i, run := range runs {
		out[i] = listedRun{Run: run, Cell: c.name}
	}
	return out, err
}

// withParts puts under each of runs that is the control cell's the cells' parts of it.
func (s *Server) withParts(ctx context.Context, runs []listedRun) error {
	control := s.controlName()
	var ids []int64
	for _, r := range runs {
		if r.Cell == control {
			ids = append(ids, r.ID)
		}
	}
	parts, err := s.partsOf(ctx, ids)
	for i := range runs {
		runs[i].Parts = parts[runs[i].ID]
	}
	return err
}

// partsOf is the cells' parts of the control cell's runs ids, by run, in the cells' order (each
// cell's oldest first).
func (s *Server) partsOf(ctx context.Context, ids []int64) (map[int64][]listedRun, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) ([]listedRun, error) {
		return c.runs(ctx, reconcile.RunFilter{PartsOf: ids, Limit: reconcile.MaxRunsListed})
	})
	if err != nil {
		return nil, err
	}
	out := map[int64][]listedRun{}
	for _, cellParts := range got {
		for i := len(cellParts) - 1; i >= 0; i-- {
			p := cellParts[i]
			out[*p.ControlRunID] = append(out[*p.ControlRunID], p)
		}
	}
	return out, nil
}
