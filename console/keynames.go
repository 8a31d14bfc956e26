package console

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idemops/idemops/templates"
)

// keyNamesMax bounds one lookup of key names (a page of rows names at most this many keys).
const keyNamesMax = 1000

// keyNames names the keys ids as people know them (tenant · operation · key) for op. A key op may
// not see — by the same rule as its page (getKey) — or one that is gone is named by its id only.
// The raw keys are rendered into the page for op; they are never put into a URL or a log.
func (s *Server) keyNames(ctx context.Context, op *Operator, ids []int64) (map[int64]templates.KeyName, error) {
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
	var rows []struct {
		ID                     int64
		Tenant, Operation, Key string
	}
	if err := s.db.WithContext(ctx).Raw(`SELECT id, tenant, operation, key FROM idempotency_keys WHERE id IN ?`, want).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("key names: %w", err)
	}
	for _, r := range rows {
		if decide(op, objKey, strconv.FormatInt(r.ID, 10), []string{r.Tenant}, false) != nil {
			continue
		}
		out[r.ID] = templates.KeyName{ID: r.ID, Tenant: r.Tenant, Operation: r.Operation, Key: r.Key}
	}
	return out, nil
}
