package console

import (
	"context"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/replay"
)

// countMatching counts the keys of a search up to BulkCap (more says more match): the "N" of
// "select all N matching this filter".
func (s *Server) countMatching(ctx context.Context, op *access.Operator, f KeyFilter) (n int, more bool, err error) {
	ids, err := keys.MatchingIDs(ctx, s.db, s.keyScope(op), f, s.cfg.BulkCap)
	if err != nil {
		return 0, false, err
	}
	if len(ids) > s.cfg.BulkCap {
		return s.cfg.BulkCap, true, nil
	}
	return len(ids), false, nil
}

// bulkKeys chooses the keys of a bulk replay: the ids picked, else everything the search
// matches up to BulkCap (one more says more matched).
func (s *Server) bulkKeys(ctx context.Context, op *access.Operator, f KeyFilter, ids []int64) (replay.BulkSelection, error) {
	sel := replay.BulkSelection{Filter: f.Query().Encode(), Selected: len(ids) > 0}
	if s.cells.cells != nil {
		// A run, its items and the daemon's job that works it live in one database.
		return sel, refused("bulk replays are not available when tenants live in several cells: replay keys one at a time")
	}
	var err error
	if len(ids) > 0 {
		if len(ids) > s.cfg.BulkCap {
			return sel, inputErr("id", "%d keys selected; a bulk replay takes at most %d", len(ids), s.cfg.BulkCap)
		}
		if sel.Keys, err = keys.Selected(ctx, s.db, s.keyScope(op), ids); err != nil {
			return sel, err
		}
		if len(sel.Keys) == 0 {
			return sel, inputErr("id", "none of the selected keys is visible to you")
		}
		return sel, nil
	}
	if sel.Keys, err = keys.Matching(ctx, s.db, s.keyScope(op), f, s.cfg.BulkCap); err != nil {
		return sel, err
	}
	if len(sel.Keys) == 0 {
		return sel, inputErr("filter", "no key matches this search")
	}
	return sel, nil
}
