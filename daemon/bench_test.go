package daemon_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// Benchmark sizes; override with the environment on a bigger or smaller machine.
const (
	// benchTakeoverRows expired leases are taken over (IDEMOPS_BENCH_TAKEOVER_ROWS).
	benchTakeoverRows = 100_000
	// benchReclaimRows expired keys go through the whole reclaimer with a stubbed lookup
	// (IDEMOPS_BENCH_RECLAIM_ROWS).
	benchReclaimRows = 10_000
	// benchScanRows keys, none expired, under the reclaimer's scan (IDEMOPS_BENCH_ROWS).
	benchScanRows = 1_000_000
	// benchBatch is the takeover batch size for both sides of the comparison.
	benchBatch = 1000
)

func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// seedKeysSQL fills table with n keys: the first expired of them processing with an expired
// lease, the next live of them processing with a live lease, the rest completed.
const seedKeysSQL = `
INSERT INTO %[1]s (tenant, operation, key, key_digest, fingerprint, fingerprint_version, request, state,
    lease_owner, lease_token, lease_expires_at, downstream_key, completed_at)
SELECT 't' || (g %% 50), 'bench.charge', 'k-' || g, md5('d' || g), md5('f' || g), 1, '{"amount":100,"currency":"CNY"}',
       CASE WHEN g <= (%[3]d + %[4]d) THEN 'processing' ELSE 'completed' END,
       CASE WHEN g <= (%[3]d + %[4]d) THEN 'crashed-host:1' END,
       CASE WHEN g <= (%[3]d + %[4]d) THEN gen_random_uuid() END,
       CASE WHEN g <= %[3]d THEN now() - interval '1 hour' + g * interval '1 millisecond'
            WHEN g <= (%[3]d + %[4]d) THEN now() + interval '1 hour' END,
       md5('dk' || g),
       CASE WHEN g > (%[3]d + %[4]d) THEN now() END
FROM generate_series(1, %[2]d) g`

func seedKeys(b *testing.B, db *gorm.DB, table string, n, expired, live int) {
	b.Helper()
	if err := db.Exec(fmt.Sprintf(seedKeysSQL, table, n, expired, live)).Error; err != nil {
		b.Fatalf("seed %s: %v", table, err)
	}
	if err := db.Exec(`VACUUM ANALYZE ` + table).Error; err != nil {
		b.Fatal(err)
	}
}

// baselineSQL is the textbook SKIP LOCKED takeover the issue names, on a copy of the table,
// setting the same columns and returning the same ones as claim's takeover (without its
// per-key history events, which the baseline does not write).
const baselineSQL = `
UPDATE bench_keys k
SET lease_owner = $1, lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds',
    attempts = k.attempts + 1, version = k.version + 1, updated_at = now()
WHERE k.id IN (
    SELECT id FROM bench_keys WHERE state = 'processing' AND lease_expires_at < now()
    ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING k.id, k.tenant, k.operation, k.key, k.key_digest, k.downstream_key, k.request::text,
          k.amount_minor, k.currency, k.lease_token::text, k.attempts, k.not_found_at`

// BenchmarkTakeoverExpired takes over benchTakeoverRows expired leases through
// claim.Store.TakeoverExpired (what the reclaimer does first) and, on an identical table in the
// same database, through the raw UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)
// RETURNING baseline; then benchReclaimRows keys through the whole reclaimer with a lookup
// stubbed in-process (found at once → Apply + Complete). Targets: ratio ≥ 0.8, ≥ 5,000
// takeovers/s.
func BenchmarkTakeoverExpired(b *testing.B) {
	n := benchSize("IDEMOPS_BENCH_TAKEOVER_ROWS", benchTakeoverRows)
	url := pgtest.URL(b)
	db := open(b, url)
	ctx := context.Background()
	// A production lease TTL: taken-over keys must not expire again during the measurement.
	store := newStore(b, db, "bench-daemon", func(c *claim.Config) { c.LeaseTTL = 30 * time.Second })

	seedKeys(b, db, "idempotency_keys", n, n, 0)
	if err := db.Exec(`CREATE TABLE bench_keys (LIKE idempotency_keys INCLUDING ALL)`).Error; err != nil {
		b.Fatal(err)
	}
	seedKeys(b, db, "bench_keys", n, n, 0)
	sqlDB, err := db.DB()
	if err != nil {
		b.Fatal(err)
	}

	var claimRate, rawRate float64
	for range b.N {
		start := time.Now()
		taken := 0
		for taken < n {
			ls, err := store.TakeoverExpired(ctx, benchBatch, daemon.ReclaimActor)
			if err != nil {
				b.Fatal(err)
			}
			if len(ls) == 0 {
				break
			}
			taken += len(ls)
		}
		claimRate = float64(taken) / time.Since(start).Seconds()
		if taken != n {
			b.Fatalf("took over %d of %d", taken, n)
		}

		start = time.Now()
		taken = 0
		for taken < n {
			rows, err := sqlDB.QueryContext(ctx, baselineSQL, "bench-daemon", benchBatch)
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for rows.Next() {
				var id, attempts int64
				var tenant, op, key, digest, dkey, request, token string
				var amount, currency, notFound any
				if err := rows.Scan(&id, &tenant, &op, &key, &digest, &dkey, &request, &amount, &currency, &token,
					&attempts, &notFound); err != nil {
					b.Fatal(err)
				}
				got++
			}
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
			rows.Close()
			if got == 0 {
				break
			}
			taken += got
		}
		rawRate = float64(taken) / time.Since(start).Seconds()
		if taken != n {
			b.Fatalf("baseline took over %d of %d", taken, n)
		}
		// Put both tables back for the next b.N round.
		if b.N > 1 {
			for _, t := range []string{"idempotency_keys", "bench_keys"} {
				if err := db.Exec(`UPDATE ` + t + ` SET lease_expires_at = now() - interval '1 hour'`).Error; err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(claimRate, "takeovers/s")
	b.ReportMetric(rawRate, "baseline_takeovers/s")
	b.ReportMetric(claimRate/rawRate, "ratio")
	b.Logf("%d expired leases, batches of %d: claim.TakeoverExpired %.0f/s, raw SKIP LOCKED UPDATE %.0f/s, ratio %.2f",
		n, benchBatch, claimRate, rawRate, claimRate/rawRate)

	// The whole reclaimer on fresh keys: takeover, stubbed lookup (found), Apply + Complete.
	m := benchSize("IDEMOPS_BENCH_RECLAIM_ROWS", benchReclaimRows)
	if err := db.Exec(`TRUNCATE idempotency_keys CASCADE`).Error; err != nil {
		b.Fatal(err)
	}
	seedKeys(b, db, "idempotency_keys", m, m, 0)
	op := newFakeOp("bench.charge", found)
	job := newReclaim(b, store, ops{"bench.charge": op}, daemon.ReclaimConfig{BatchSize: 200, Workers: 8, MaxPerRun: m})
	start := time.Now()
	stats, err := job.RunOnce(ctx, nil, daemon.NopProgress{})
	if err != nil || stats["recovered"] != int64(m) {
		b.Fatalf("reclaim: %v, %v; want %d recovered", stats, err, m)
	}
	reclaimRate := float64(m) / time.Since(start).Seconds()
	b.ReportMetric(reclaimRate, "reclaimed/s")
	b.Logf("full reclaim of %d keys (stubbed lookup, Apply + Complete, 8 workers): %.0f keys/s", m, reclaimRate)
}

// BenchmarkReclaimScanNothingExpired times the reclaimer's select (the takeover statement) on
// benchScanRows keys of which none has expired: 5%% processing with live leases, the rest
// completed. The partial index idempotency_keys_reclaim_idx answers it without visiting the
// table. Target ≤ 5 ms.
func BenchmarkReclaimScanNothingExpired(b *testing.B) {
	n := benchSize("IDEMOPS_BENCH_ROWS", benchScanRows)
	db := open(b, pgtest.URL(b))
	ctx := context.Background()
	store := newStore(b, db, "bench-daemon", func(c *claim.Config) { c.LeaseTTL = 30 * time.Second })
	seedKeys(b, db, "idempotency_keys", n, 0, n/20)

	var plan []string
	if err := db.Raw(`EXPLAIN SELECT id FROM idempotency_keys WHERE state = 'processing' AND lease_expires_at < now()
		ORDER BY lease_expires_at LIMIT 100 FOR UPDATE SKIP LOCKED`).Scan(&plan).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("plan: %s", strings.Join(plan, " / "))

	const rounds = 200
	scan := func() time.Duration {
		t0 := time.Now()
		ls, err := store.TakeoverExpired(ctx, 100, daemon.ReclaimActor)
		if err != nil || len(ls) != 0 {
			b.Fatalf("scan: %d leases, %v", len(ls), err)
		}
		return time.Since(t0)
	}
	for range 10 { // warm the connections and the statement cache
		scan()
	}
	b.ResetTimer()
	var times []time.Duration
	for range b.N * rounds {
		times = append(times, scan())
	}
	slices.Sort(times)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var sum time.Duration
	for _, d := range times {
		sum += d
	}
	p50, p99, avg := times[len(times)/2], times[len(times)*99/100], sum/time.Duration(len(times))
	b.ReportMetric(ms(p50), "scan_ms")
	b.ReportMetric(ms(avg), "avg_scan_ms")
	b.ReportMetric(ms(p99), "p99_scan_ms")
	b.Logf("%d keys, none expired: reclaimer scan (the whole takeover statement, one round trip) p50 %.3f ms, mean %.3f ms, p99 %.3f ms over %d",
		n, ms(p50), ms(avg), ms(p99), len(times))
}
