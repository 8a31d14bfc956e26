package reconcile_test

import (
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// TestListRuns_PagesPastInt4Ids: in a tenant cell every run id is at least cell id << 40
// (package cells); the page cursor is a bigint, or the second page of a cell's runs fails.
func TestListRuns_PagesPastInt4Ids(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `SELECT setval('recon_runs_id_seq', 2::bigint << 40)`)
	var ids []int64
	for range 3 {
		id, err := b.rec.StartRun(b.ctx, nil, "wechat", "", "operator:test")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	runs, err := b.rec.ListRuns(b.ctx, reconcile.RunFilter{BeforeID: ids[2], Limit: 10})
	if err != nil || len(runs) != 2 || runs[0].ID != ids[1] || runs[1].ID != ids[0] {
		t.Fatalf("runs before %d: %v %v; want %d, %d", ids[2], runs, err, ids[1], ids[0])
	}
}
