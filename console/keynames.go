package console

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/templates"
)

// keyNamesMax bounds one lookup of key names (a page of rows names at most this many keys).
const keyNamesMax = 1000

// keyNames names the keys ids as people know them (tenant · operation · key) for op. A key op may
// not see — by the same rule as its page (getKey) — or one that is gone is named by its id only.
// The raw keys are rendered into the page for op; they are never put into a URL or a log.
func (s *Server) keyNames(ctx context.Context, op *access.Operator, ids []int64) (map[int64]templates.KeyName, error) {
	out := make(map[int64]templates.KeyName, len(ids))
	var want []int64
	for _, id := range ids {
		if _, ok := out[id]; !ok && id > 0 {
			out[id] = templates.KeyName{ID: id}
			want = append(want, id)
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	if len(want) > keyNamesMax {
		want = want[:keyNamesMax]
	}
	names, err := eachCell(ctx, s.cells.For(keyScope(op), ""), func(ctx context.Context, c scopedCell) ([]keys.KeyName, error) {
		rows, err := keys.NamesOf(ctx, c.db, want)
		if s.cells.cells == nil {
			return rows, err
		}
		held := rows[:0]
		for _, r := range rows {
			if c.held.MaySee(r.Tenant) { // not a copy a tenant move left behind
				held = append(held, r)
			}
		}
		return held, err
	})
	if err != nil {
		return nil, err
	}
	for _, r := range slices.Concat(names...) {
		if access.Decide(op, access.ObjKey, strconv.FormatInt(r.ID, 10), []string{r.Tenant}, false) != nil {
			continue
		}
		out[r.ID] = templates.KeyName{ID: r.ID, Tenant: r.Tenant, Operation: r.Operation, Key: r.Key}
	}
	return out, nil
}

// nameReplayRows names the key of each replay request row for op.
func (s *Server) nameReplayRows(ctx context.Context, op *access.Operator, rows []templates.ReplayRow) error {
	return nameKeys(ctx, s, op, rows, func(r *templates.ReplayRow) *int64 { return &r.KeyID },
		func(r *templates.ReplayRow, n templates.KeyName) { r.Name = n })
}

// nameBulkItems names the key of each bulk replay item for op.
func (s *Server) nameBulkItems(ctx context.Context, op *access.Operator, items []templates.BulkItemRow) error {
	return nameKeys(ctx, s, op, items, func(it *templates.BulkItemRow) *int64 { return &it.KeyID },
		func(it *templates.BulkItemRow, n templates.KeyName) { it.Name = n })
}

// nameKeys names the key of each row for op in one query: keyOf points at a row's key id, name
// sets its name.
func nameKeys[T any](ctx context.Context, s *Server, op *access.Operator, rows []T, keyOf func(*T) *int64, name func(*T, templates.KeyName)) error {
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = *keyOf(&rows[i])
	}
	names, err := s.keyNames(ctx, op, ids)
	if err != nil {
		return err
	}
	for i := range rows {
		name(&rows[i], names[ids[i]])
	}
	return nil
}

// auditKeyTarget is the key id of an audit target "key:ID".
func auditKeyTarget(target string) (int64, bool) {
	ref, ok := strings.CutPrefix(target, "key:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(ref, 10, 64)
	return id, err == nil && id > 0
}
