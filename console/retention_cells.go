package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/retention"
)

// Retention across tenant cells: each cell's daemon purges its own keys by its own policies and
// floor (retention's tables in each cell), so the console saves a policy or the floor in every
// cell — the control cell first, with its audit row, then the others; a cell that fails is named
// and saving again brings it in line — and a dry run counts in every cell and adds them up. The
// page lists the control cell's policies and purge history.

// inOtherCells runs change in every cell but the control database's, in one transaction each.
// Errors name the cells that failed; the control cell's change stands (save again to repeat it).
func (s *Server) inOtherCells(ctx context.Context, change func(context.Context, *cell) error) error {
	if s.cells.cells == nil {
		return nil
	}
	var in []scopedCell
	for _, c := range s.cells.everywhere() {
		if c.db != s.db {
			in = append(in, c)
		}
	}
	if len(in) == 0 {
		return nil
	}
	_, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) (struct{}, error) {
		if err := change(ctx, c.cell); err != nil {
			return struct{}{}, fmt.Errorf("saved in the control cell, not in cell %s (save again): %w", c.name, err)
		}
		return struct{}{}, nil
	})
	return err
}

// dryRunIn is a dry run in every cell, added up: the control cell's purge_log row is the
// report's; counts estimated in any cell make the sum an estimate. A cell left out
// (leaveOutFailedCells) adds nothing; when none answered it is an error.
func (s *Server) dryRunIn(ctx context.Context, operation, actor string) (*retention.Report, error) {
	in := s.cells.everywhere()
	reps, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) (*retention.Report, error) {
		if c.db == s.db {
			return s.purge.DryRun(ctx, operation, actor)
		}
		return c.purge.DryRun(ctx, operation, actor)
	})
	if err != nil || len(reps) == 1 {
		return reps[0], err
	}
	i := slices.IndexFunc(reps, func(rep *retention.Report) bool { return rep != nil })
	if i < 0 {
		return nil, errs.New(errs.Unavailable, "no cell answered the dry run")
	}
	out := *reps[i]
	out.RunID, out.Deleted, out.Tombstoned, out.Due = 0, 0, 0, nil
	out.Sample = keys.DueSample{Fraction: 1}
	due := map[keys.DueCount]int64{}
	for i, rep := range reps {
		if rep == nil {
			continue
		}
		if in[i].db == s.db {
			out.RunID = rep.RunID
		}
		out.Deleted += rep.Deleted
		out.Tombstoned += rep.Tombstoned
		for _, d := range rep.Due {
			n := d.N
			d.N = 0
			due[d] += n
		}
		out.Sample.Rows += rep.Sample.Rows
		out.Sample.Fraction = min(out.Sample.Fraction, rep.Sample.Fraction)
	}
	for d, n := range due {
		d.N = n
		out.Due = append(out.Due, d)
	}
	slices.SortFunc(out.Due, func(a, b keys.DueCount) int {
		return cmp.Or(cmp.Compare(a.Phase, b.Phase), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.State, b.State), a.Day.Compare(b.Day))
	})
	return &out, nil
}
