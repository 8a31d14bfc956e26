package console

import (
	"context"
	"fmt"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/replay"
)

// matchingIDs collects the ids of up to limit+1 keys of the search, newest first.
func (s *Server) matchingIDs(ctx context.Context, op *access.Operator, f KeyFilter, limit int) ([]int64, error) {
	f.After, f.Limit = nil, 200
	var ids []int64
	for page := 0; page <= limit/200+1 && len(ids) <= limit; page++ {
		rows, next, err := SearchKeys(ctx, s.db, op, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == nil {
			break
		}
		f.After = next
	}
	if len(ids) > limit+1 {
		ids = ids[:limit+1]
	}
	return ids, nil
}

// countMatching counts the keys of a search up to BulkCap (more says more match): the "N" of
// "select all N matching this filter".
func (s *Server) countMatching(ctx context.Context, op *access.Operator, f KeyFilter) (n int, more bool, err error) {
	ids, err := s.matchingIDs(ctx, op, f, s.cfg.BulkCap)
	if err != nil {
		return 0, false, err
	}
	if len(ids) > s.cfg.BulkCap {
		return s.cfg.BulkCap, true, nil
	}
	return len(ids), false, nil
}

// matchingKeys collects up to limit+1 keys of the search, newest first, with their full rows.
func (s *Server) matchingKeys(ctx context.Context, op *access.Operator, f KeyFilter, limit int) ([]claim.Key, error) {
	ids, err := s.matchingIDs(ctx, op, f, limit)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var keys []claim.Key
	if err := s.db.WithContext(ctx).Raw(`SELECT `+claim.KeyColumns+` FROM idempotency_keys WHERE id IN ?`, ids).
		Scan(&keys).Error; err != nil {
		return nil, fmt.Errorf("read matching keys: %w", err)
	}
	pos := make(map[int64]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	ordered := make([]claim.Key, 0, len(keys))
	slot := make([]*claim.Key, len(ids))
	for i := range keys {
		slot[pos[keys[i].ID]] = &keys[i]
	}
	for _, k := range slot {
		if k != nil { // purged between the search and the read
			ordered = append(ordered, *k)
		}
	}
	return ordered, nil
}

// selectedKeys reads the keys op picked by id, newest first; ids outside op's tenants or gone
// are left out (the preview lists what it takes).
func (s *Server) selectedKeys(ctx context.Context, op *access.Operator, ids []int64) ([]claim.Key, error) {
	cond, args, none := tenantCondition(op)
	if none {
		return nil, nil
	}
	sql := `SELECT ` + claim.KeyColumns + ` FROM idempotency_keys WHERE id IN ?`
	all := append([]any{ids}, args...)
	if cond != "" {
		sql += " AND " + cond
	}
	var keys []claim.Key
	if err := s.db.WithContext(ctx).Raw(sql+" ORDER BY created_at DESC, id DESC", all...).Scan(&keys).Error; err != nil {
		return nil, fmt.Errorf("read selected keys: %w", err)
	}
	return keys, nil
}

// bulkKeys chooses the keys of a bulk replay: the ids picked, else everything the search
// matches up to BulkCap (one more says more matched).
func (s *Server) bulkKeys(ctx context.Context, op *access.Operator, f KeyFilter, ids []int64) (replay.BulkSelection, error) {
	sel := replay.BulkSelection{Filter: f.Query().Encode(), Selected: len(ids) > 0}
	var err error
	if len(ids) > 0 {
		if len(ids) > s.cfg.BulkCap {
			return sel, inputErr("id", "%d keys selected; a bulk replay takes at most %d", len(ids), s.cfg.BulkCap)
		}
		if sel.Keys, err = s.selectedKeys(ctx, op, ids); err != nil {
			return sel, err
		}
		if len(sel.Keys) == 0 {
			return sel, inputErr("id", "none of the selected keys is visible to you")
		}
		return sel, nil
	}
	if sel.Keys, err = s.matchingKeys(ctx, op, f, s.cfg.BulkCap); err != nil {
		return sel, err
	}
	if len(sel.Keys) == 0 {
		return sel, inputErr("filter", "no key matches this search")
	}
	return sel, nil
}
