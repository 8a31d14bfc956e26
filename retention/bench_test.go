package retention_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

// benchRows is how many expired keys each side purges (IDEMOPS_BENCH_ROWS overrides).
const benchRows = 1_000_000

// BenchmarkPurge purges benchRows expired keys (two events each, plus a tenth as many live
// keys that must stay) with retention's batched purge, and the same rows in an identical
// database with one `DELETE … WHERE expires_at < now()`, and reports rows/s of both and their
// ratio. Target: ≥ 100k rows/s. A claim loop (Claim + Complete, two paced goroutines) runs during
// both, and alone before them: it reports claim p99 idle, during the purge (target: ≤ 2× idle)
// and during the single DELETE.
func BenchmarkPurge(b *testing.B) {
	rows := benchRows
	if v, err := strconv.Atoi(os.Getenv("IDEMOPS_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	ctx := context.Background()
	ours, base := benchDB(b, rows), benchDB(b, rows)
	// Steady state: a policy equal to the claim defaults, and a stamp cursor that earlier runs
	// have brought up to now, so that the run measures deletion (with its policy check).
	if err := retention.SavePolicy(ctx, ours, retention.Policy{Operation: "*", State: claim.StateCompleted,
		KeepResponse: 72 * time.Hour, KeepKey: 30 * day}, "operator:bench"); err != nil {
		b.Fatal(err)
	}
	pgtest.Exec(b, ours, `UPDATE retention_settings SET stamp_cursor_at = now()`)
	job, store, baseStore := purgeBenchParts(b, ours, base, secret)

	for range b.N {
		warmClaims(ctx, b, store, baseStore)
		idle := claimLoop(ctx, b, store, "idle", func(ctx context.Context) { sleepCtx(ctx, 3*time.Second) })

		// Both sides run under the same claim load, so that their rates compare.
		var baseSecs float64
		duringDelete := claimLoop(ctx, b, baseStore, "delete", func(context.Context) {
			start := time.Now()
			// One statement, taking the keys' history with them as the purge does.
			if err := base.Exec(`WITH gone AS (DELETE FROM idempotency_keys WHERE expires_at < now() RETURNING id)
				DELETE FROM key_events WHERE key_id IN (SELECT id FROM gone)`).Error; err != nil {
				b.Error(err)
			}
			baseSecs = time.Since(start).Seconds()
		})
		var left int64
		base.Raw(`SELECT count(*) FROM idempotency_keys WHERE key NOT LIKE 'delete-%'`).Scan(&left)
		if left != int64(rows/10) {
			b.Fatalf("baseline left %d keys, want %d", left, rows/10)
		}

		var rep *retention.Report
		var err error
		var purgeSecs float64
		during := claimLoop(ctx, b, store, "during", func(context.Context) {
			start := time.Now()
			rep, err = job.Purge(ctx, retention.Options{Actor: "operator:bench"}, nil)
			purgeSecs = time.Since(start).Seconds()
		})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Deleted != int64(rows) {
			b.Fatalf("purge deleted %d keys, want %d", rep.Deleted, rows)
		}

		oursRate, baseRate := float64(rep.Deleted)/purgeSecs, float64(rows)/baseSecs
		reportPurge(b, rows, "purge", "delete", oursRate, baseRate, idle, during, duringDelete)
		b.Logf("rows %d: purge %.0f rows/s (%.1fs, batch %d, %d timeouts), single DELETE %.0f rows/s (%.1fs), ratio %.2f; "+
			"claim p99 %.1fms idle, %.1fms during the purge (x%.2f), %.1fms during the single DELETE",
			rows, oursRate, purgeSecs, rep.BatchSize, rep.Timeouts, baseRate, baseSecs, oursRate/baseRate,
			ms(idle), ms(during), float64(during)/float64(idle), ms(duringDelete))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// benchDB is a fresh database with rows expired keys (2 events each) and rows/10 live ones.
func benchDB(b *testing.B, rows int) *gorm.DB {
	b.Helper()
	db, err := pgpool.Open(pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	seedExpired(b, db, "payment.charge", rows, 2, 40*day)
	seedExpired(b, db, "payment.refund", rows/10, 2, day)
	pgtest.Exec(b, db, `VACUUM ANALYZE idempotency_keys`)
	pgtest.Exec(b, db, `VACUUM ANALYZE key_events`)
	b.Logf("seeded %d keys in %s", rows+rows/10, time.Since(start).Round(time.Millisecond))
	return db
}

// settle lets the seeding's writes reach the disk before anything is measured: a checkpoint
// (through the cluster's admin URL, DATABASE_URL; the test databases' owner may not run one) and
// the kernel's writeback, which otherwise run during the first windows and put their stalls in
// whichever p99 they fall on.
func settle(b *testing.B) {
	b.Helper()
	admin, err := pgpool.Open(os.Getenv("DATABASE_URL"))
	if err != nil {
		b.Fatal(err)
	}
	pgtest.Exec(b, admin, `CHECKPOINT`)
	if sqlDB, err := admin.DB(); err == nil {
		sqlDB.Close()
	}
	syscall.Sync()
}

// warmClaims runs each store's claim loop for a second and discards what it measured: the
// loop's first claims open its connections, prepare its statements and create the day's answer
// partition, tens of milliseconds that would otherwise land in whichever window comes first (the
// idle one) and make its p99 the warm-up's, not the idle machine's.
func warmClaims(ctx context.Context, b *testing.B, stores ...*claim.Store) {
	b.Helper()
	settle(b)
	for i, s := range stores {
		claimLoop(ctx, b, s, "warm"+strconv.Itoa(i), func(ctx context.Context) { sleepCtx(ctx, time.Second) })
	}
}

// claimLoop runs Claim + Complete on fresh keys from two paced goroutines while work runs, and
// returns the p99 latency of the pairs.
func claimLoop(ctx context.Context, b *testing.B, store *claim.Store, name string, work func(context.Context)) time.Duration {
	b.Helper()
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Value
	var measuring atomic.Bool
	for g := range 2 {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; loopCtx.Err() == nil && i < 1_000_000; i++ {
				t := time.Now()
				out, err := store.Claim(ctx, request("bench.loop", fmt.Sprintf("%s-%d-%d", name, g, i)))
				if err == nil && out.Kind == claim.Acquired {
					err = store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, ResourceID: "r"})
				} else if err == nil {
					err = fmt.Errorf("claim: %s", out.Kind)
				}
				if err != nil {
					failed.Store(err)
					return
				}
				if measuring.Load() {
					mine = append(mine, time.Since(t))
				}
				// Paced like a service's traffic (~150 claims/s per goroutine), not a saturating
				// loop that would take the machine's two cores from both sides.
				sleepCtx(loopCtx, 5*time.Millisecond)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	// A lead-in that is not measured: the loops' first claims after a pause ran tens of
	// milliseconds (a window's start, and so the moment its work starts too), which put their
	// start-up in the p99 of every window but the idle one. Each window now measures loops
	// already running, and its work starts with the measuring.
	sleepCtx(loopCtx, 500*time.Millisecond)
	measuring.Store(true)
	work(loopCtx)
	stop()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("claim loop %s: %v", name, err)
	}
	if len(lat) == 0 {
		b.Fatalf("claim loop %s measured nothing", name)
	}
	slices.Sort(lat)
	b.Logf("claims %s: n=%d p50 %v p99 %v max %v", name, len(lat), lat[len(lat)/2].Round(time.Microsecond),
		lat[len(lat)*99/100].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	return lat[len(lat)*99/100]
}

// BenchmarkResponseDrop measures retention's first stage on stored answers: rows keys answered
// on one day ten days ago (response period over, key period not) lose their answers through a
// purge — the day's key_responses partition dropped — and, in an identical database, the same
// answer rows go by batched DELETE (batches of the purge's size, each its own transaction: the
// row-by-row way). It reports both rates and their ratio (target ≥ 10), and claim p99 idle and
// during each (target during the purge: ≤ 1.2× idle). It runs at BenchmarkPurge's scale (a million
// answers): a purge run's fixed work (policies, stamps, the key scan) outweighs the drop itself at a
// few hundred thousand, so a smaller day measures the run, not the way bodies go.
func BenchmarkResponseDrop(b *testing.B) {
	rows := benchRows
	if v, err := strconv.Atoi(os.Getenv("IDEMOPS_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	ctx := context.Background()
	seed := func() *gorm.DB {
		db, err := pgpool.Open(pgtest.URL(b))
		if err != nil {
			b.Fatal(err)
		}
		seedExpired(b, db, "payment.charge", rows, 0, 10*day)
		pgtest.Exec(b, db, `VACUUM ANALYZE idempotency_keys`)
		pgtest.Exec(b, db, `VACUUM ANALYZE key_responses`)
		return db
	}
	ours, base := seed(), seed()
	pgtest.Exec(b, ours, `UPDATE retention_settings SET stamp_cursor_at = now()`)
	job, store, baseStore := purgeBenchParts(b, ours, base, secret)
	const batch = 10_000 // retention.Config's default batch size
	for range b.N {
		warmClaims(ctx, b, store, baseStore)
		idle := claimLoop(ctx, b, store, "idle", func(ctx context.Context) { sleepCtx(ctx, 3*time.Second) })

		var baseSecs float64
		// Each window lasts at least as long as the idle one, so that every p99 has as many
		// samples behind it (the drop itself takes a fraction of a second).
		duringDelete := claimLoop(ctx, b, baseStore, "delete", func(ctx context.Context) {
			start := time.Now()
			defer func() { sleepCtx(ctx, 3*time.Second-time.Since(start)) }()
			for i := 0; i < rows/batch+2; i++ {
				res := base.Exec(`DELETE FROM key_responses WHERE ctid = ANY (ARRAY (
					SELECT r.ctid FROM key_responses r JOIN idempotency_keys k ON k.id = r.key_id
					WHERE k.tenant = 'seed' AND k.response_expires_at < now() LIMIT ?))`, batch)
				if res.Error != nil {
					b.Error(res.Error)
					return
				}
				if res.RowsAffected < int64(batch) {
					break
				}
			}
			baseSecs = time.Since(start).Seconds()
		})
		var left int64
		base.Raw(`SELECT count(*) FROM key_responses r JOIN idempotency_keys k ON k.id = r.key_id WHERE k.tenant = 'seed'`).Scan(&left)
		if left != 0 {
			b.Fatalf("baseline left %d answers", left)
		}

		var rep *retention.Report
		var err error
		var purgeSecs float64
		during := claimLoop(ctx, b, store, "during", func(ctx context.Context) {
			start := time.Now()
			rep, err = job.Purge(ctx, retention.Options{Actor: "operator:bench"}, nil)
			purgeSecs = time.Since(start).Seconds()
			sleepCtx(ctx, 3*time.Second-time.Since(start))
		})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Tombstoned != int64(rows) {
			b.Fatalf("purge removed %d answers, want %d", rep.Tombstoned, rows)
		}
		oursRate, baseRate := float64(rows)/purgeSecs, float64(rows)/baseSecs
		reportPurge(b, rows, "drop", "batched_delete", oursRate, baseRate, idle, during, duringDelete)
		b.Logf("answers %d: purge (partition drop) %.0f rows/s (%.2fs), batched DELETE %.0f rows/s (%.2fs), ratio %.1f (target ≥ 10); "+
			"claim p99 %.1fms idle, %.1fms during the purge (x%.2f, target ≤ 1.2), %.1fms during the batched DELETE (x%.2f)",
			rows, oursRate, purgeSecs, baseRate, baseSecs, oursRate/baseRate,
			ms(idle), ms(during), float64(during)/float64(idle), ms(duringDelete), float64(duringDelete)/float64(idle))
	}
}

// purgeBenchParts is what both purge benchmarks drive: the purge job on ours, and a claim store
// on each side.
func purgeBenchParts(b *testing.B, ours, base *gorm.DB, secret []byte) (*retention.PurgeJob, *claim.Store, *claim.Store) {
	b.Helper()
	job, err := retention.NewPurgeJob(ours, retention.Config{})
	if err != nil {
		b.Fatal(err)
	}
	store, err := claim.NewStore(ours, claim.Config{DigestSecret: secret, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	baseStore, err := claim.NewStore(base, claim.Config{DigestSecret: secret, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return job, store, baseStore
}

// reportPurge reports one purge benchmark's figures: the rates of ours and the baseline's
// delete, and claim p99 idle, during ours and during the baseline's.
func reportPurge(b *testing.B, rows int, ours, base string, oursRate, baseRate float64, idle, during, duringDelete time.Duration) {
	b.ReportMetric(float64(rows), "rows")
	b.ReportMetric(oursRate, ours+"_rows/s")
	b.ReportMetric(baseRate, base+"_rows/s")
	b.ReportMetric(oursRate/baseRate, "rate_ratio")
	b.ReportMetric(ms(idle), "claim_p99_idle_ms")
	b.ReportMetric(ms(during), "claim_p99_"+ours+"_ms")
	b.ReportMetric(ms(duringDelete), "claim_p99_delete_ms")
	b.ReportMetric(float64(during)/float64(idle), "p99_ratio")
}
