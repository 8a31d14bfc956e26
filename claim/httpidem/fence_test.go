package httpidem_test

import (
	"encoding/json"
	"testing"

	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// A tenant fenced for a move between cells (migration 00135) is answered 503 tenant-moving with
// Retry-After: 1 on both kinds of route, on every retry while the fence stands: nothing runs and
// nothing is stored. Other tenants are served meanwhile; once the fence is lifted the same key
// executes.
func TestFrozenTenant_Answers503AndStoresNothing(t *testing.T) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			w := newWorldOn(t, flavor)
			pgtest.Exec(t, w.db, `INSERT INTO cell_fences (tenant, state) VALUES ('tenant-a', 'frozen')`)
			for _, path := range []string{"/charge", "/orders"} {
				for range 2 {
					r := w.post(path, "tok-a", []string{"k-moving"}, pay)
					if r.status != 503 || problemType(t, r) != "tenant-moving" || r.header.Get("Retry-After") != "1" {
						t.Fatalf("%s while frozen: %d %s (Retry-After %q), want 503 tenant-moving, Retry-After 1",
							path, r.status, r.body, r.header.Get("Retry-After"))
					}
					var p httpidem.Problem
					if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Detail == "" {
						t.Fatalf("problem without a reason: %s", r.body)
					}
				}
				if r := w.post(path, "tok-b", []string{"k-moving"}, pay); r.status != 201 {
					t.Fatalf("%s for another tenant: %d %s", path, r.status, r.body)
				}
			}
			var n int64
			w.db.Raw(`SELECT count(*) FROM idempotency_keys WHERE tenant = 'tenant-a'`).Scan(&n)
			if n != 0 || w.op.executes.Load() != 1 {
				t.Fatalf("while frozen: %d keys of the frozen tenant, %d executions (want 0, and 1 for the other tenant)", n, w.op.executes.Load())
			}
			pgtest.Exec(t, w.db, `DELETE FROM cell_fences`)
			for _, path := range []string{"/charge", "/orders"} {
				if r := w.post(path, "tok-a", []string{"k-moving"}, pay); r.status != 201 {
					t.Fatalf("%s after the fence: %d %s", path, r.status, r.body)
				}
			}
		})
	}
}
