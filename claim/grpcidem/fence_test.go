package grpcidem_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// A tenant fenced for a move between cells (migration 00135) answers Unavailable TENANT_MOVING
// with a retry delay, every time while the fence stands; the handler never runs and nothing is
// stored, so the same key executes once the fence is lifted. Other tenants are not touched.
func TestServer_FrozenTenantIsUnavailableAndNothingIsStored(t *testing.T) {
	w := newWorld(t)
	pgtest.Exec(t, w.db, `INSERT INTO cell_fences (tenant, state) VALUES ('tenant-a', 'frozen')`)
	for range 2 {
		r := w.call(w.conn, "tok-a", []string{"k-moving"}, pay)
		wantStatus(t, r, codes.Unavailable, grpcidem.ReasonTenantMoving)
		if d := grpcidem.RetryDelay(r.err); d <= 0 {
			t.Fatalf("no retry delay on %v", r.err)
		}
	}
	if r := w.call(w.conn, "tok-b", []string{"k-moving"}, pay); r.err != nil {
		t.Fatalf("another tenant: %v", r.err)
	}
	var n int64
	w.db.Raw(`SELECT count(*) FROM idempotency_keys WHERE tenant = 'tenant-a'`).Scan(&n)
	if n != 0 || w.pay.calls.Load() != 1 {
		t.Fatalf("while frozen: %d keys of the frozen tenant, handler ran %d times (want 0, and 1 for the other tenant)", n, w.pay.calls.Load())
	}
	pgtest.Exec(t, w.db, `DELETE FROM cell_fences`)
	if r := w.call(w.conn, "tok-a", []string{"k-moving"}, pay); r.err != nil || w.pay.calls.Load() != 2 {
		t.Fatalf("after the fence: %v, handler ran %d times, want 2", r.err, w.pay.calls.Load())
	}
}
