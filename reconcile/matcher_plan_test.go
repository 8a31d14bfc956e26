package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestMatchPlans_ReadTheKeysOnlyThroughIndexes: matching's cost follows the statement's lines,
// not the keys table (issue 36). No statement of the matcher scans idempotency_keys — the lean
// and the full plan, the txn-id fallback, LOCAL_ONLY, the findings' tenants and the count of keys
// without an account — whether the statement is planned as a large one (enable_nestloop off) or
// a small one, for an account of every tenant and for an account of some.
func TestMatchPlans_ReadTheKeysOnlyThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// 60,000 completed keys of 10 tenants over 30 days: the bill window is a thirtieth of them.
	pgtest.Exec(t, db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version, request,
	    state, downstream_key, amount_minor, currency, resource_id, completed_at)
	SELECT 't' || i % 10, 'payment.charge', 'k' || i, md5(i::text), 'f', 1, '{}', 'completed', 'ORD-' || i, 100 + i % 500, 'USD',
	       'ch_' || i, timestamptz '2026-03-01 00:00:00Z' + (i % 30) * interval '1 day' + (i % 86400) * interval '1 second'
	FROM generate_series(0, 59999) AS i`)
	pgtest.Exec(t, db, `ANALYZE idempotency_keys`)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC).Add(-10 * time.Minute)
	to := from.Add(24 * time.Hour)
	ops := textArray([]string{"payment.charge"})
	for _, large := range []bool{true, false} {
		for _, scope := range []any{nil, textArray([]string{"t1", "t2"})} {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			exec := func(q string, args ...any) {
				t.Helper()
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			exec(`SELECT set_config('work_mem', '256MB', true), set_config('max_parallel_workers_per_gather', '0', true),
				set_config('jit', 'off', true)`)
			if large {
				exec(`SET LOCAL enable_nestloop = off`)
			}
			explain := func(what, q string, args ...any) {
				t.Helper()
				rows, err := tx.QueryContext(ctx, `EXPLAIN `+q, args...)
				if err != nil {
					t.Fatalf("explain %s: %v", what, err)
				}
				var plan []string
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						t.Fatal(err)
					}
					plan = append(plan, line)
				}
				rows.Close()
				if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan on idempotency_keys") {
					t.Errorf("%s (large statement %v, scope %v) reads the whole keys table:\n%s", what, large, scope, p)
				}
			}
			// The order follows what each statement needs to exist: the full plan's lines, then
			// the temporary tables the others read or write.
			explain("full plan lines", matchLinesSQL, 1, scope, "stripe")
			exec(leanLinesTableSQL)
			explain("local only", localOnlySQL, ops, from, to, scope, "stripe", textArray(nil))
			explain("match by txn id", matchByTxnSQL, ops, scope, "stripe")
			exec(leanLocalOnlyTableSQL)
			explain("lean plan", leanMatchSQL, 1, ops, from, to, scope, "stripe", textArray([]string{"USD"}))
			exec(findingsTableSQL)
			explain("upsert findings", upsertFindingsSQL, 1, 1, "stripe", "2026-03-10")
			explain("keys without an account", keysWithoutAccountSQL)
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
