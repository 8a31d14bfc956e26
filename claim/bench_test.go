package claim_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/benchload"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/migrations"
)

// BenchmarkClaimComplete compares claim+complete through the claim package with a raw SQL
// baseline (INSERT … ON CONFLICT DO NOTHING RETURNING, then UPDATE) on the same table of the same
// database through the same connection pool, at concurrency 1 (latency) and 16 (throughput). Targets: latency ratio ≤ 1.3 at 1,
// throughput ratio ≥ 0.85 at 16. It runs twice, side by side in one run: on the test cluster
// (fsync, synchronous_commit and full_page_writes off: what the CPU costs) and on a private
// durable cluster (the server's defaults: what production's commits cost).
func BenchmarkClaimComplete(b *testing.B) {
	b.Run("fsync=off", func(b *testing.B) {
		claimCompleteBench(b, pgtest.URL(b), benchload.EnvInt("IDEMOPS_BENCH_CLAIMS", 4000),
			benchload.EnvInt("IDEMOPS_BENCH_CLAIMS_C16", 20000))
	})
	b.Run("fsync=on", func(b *testing.B) {
		claimCompleteBench(b, durableURL(b), benchload.EnvInt("IDEMOPS_BENCH_DURABLE_CLAIMS", 1000),
			benchload.EnvInt("IDEMOPS_BENCH_DURABLE_CLAIMS_C16", 4000))
	})
}

// durableURL starts a private cluster with the server's durable defaults (fsync,
// synchronous_commit and full_page_writes on), migrates a database on it and returns its URL; the
// cluster stops when b ends.
func durableURL(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "idemops-durable-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	c, err := pglocal.Start(context.Background(), pglocal.Options{DataDir: dir + "/data", MaxConnections: 100})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	db, err := sql.Open("pgx", c.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(context.Background(), db); err != nil {
		b.Fatalf("migrate the durable cluster: %v", err)
	}
	return c.URL("postgres")
}

// claimCompleteBench measures ops claims at one client and opsC16 at 16. At 16 clients each side
// runs in 20 interleaved rounds, and a round must last long enough (a few hundred milliseconds)
// that a scheduler hiccup is a small part of it: with 4,000 claims a round took 50 ms and the ratio
// swung 0.80-0.87 within the hour; with 20,000 it read 0.79-0.84 over four runs the same day.
func claimCompleteBench(b *testing.B, url string, ops, opsC16 int) {
	db, err := pgpool.Open(url)
	if err != nil {
		b.Fatal(err)
	}
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		b.Fatal(err)
	}
	poolSize := benchload.EnvInt("IDEMOPS_BENCH_POOL", 16)
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(poolSize)
	sqlDB.SetMaxIdleConns(poolSize)
	// Both sides go through the same pool (database/sql over pgx's stdlib, IDEMOPS_BENCH_POOL
	// connections, default 16), so that the ratio is the claim logic's cost and not two drivers'
	// difference: a pgxpool baseline ran ~8% slower at 16 clients here and flattered the ratio
	// (0.84-0.92 against it, 0.73-0.83 against the same pool, the same day).
	spec := claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency", Ignore: []string{"description"}}
	snap := &claim.Snapshot{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"payment_id":"p_1","status":"succeeded"}`), ResourceID: "p_1"}

	ours := func(ctx context.Context, tenant string, i int) error {
		out, err := store.Claim(ctx, claim.Request{Tenant: tenant, Operation: "payment.charge", Key: "k-" + strconv.Itoa(i),
			Intent: payment(100 + i), Spec: spec, Actor: "service:bench"})
		if err != nil {
			return err
		}
		if out.Kind != claim.Acquired {
			return fmt.Errorf("unexpected %s", out.Kind)
		}
		return store.Complete(ctx, nil, out.Lease, snap)
	}
	baseline := func(ctx context.Context, tenant string, i int) error {
		id, err := rawClaim(ctx, sqlDB, tenant, "payment.charge", i)
		if err != nil {
			return err
		}
		// The answer is stored where the schema keeps it (key_responses, 00060), in the same statement.
		_, err = sqlDB.ExecContext(ctx, `WITH u AS (UPDATE idempotency_keys SET state = 'completed', lease_token = NULL, lease_owner = NULL,
			lease_expires_at = NULL, resource_id = $5, response_day = (now() AT TIME ZONE 'UTC')::date,
			completed_at = now(), updated_at = now() WHERE id = $1 RETURNING id, response_day)
			INSERT INTO key_responses (key_id, day, status, headers, body) SELECT id, response_day, $2, $3, $4 FROM u`,
			id, snap.Status, `{"Content-Type":"application/json"}`, snap.Body, snap.ResourceID)
		return err
	}

	for _, conc := range []int{1, 16} {
		// Warm both paths (connections, statement caches) before measuring.
		benchload.Run(b, conc, 0, 200, fmt.Sprintf("warm-ours-%d", conc), ours)
		benchload.Run(b, conc, 0, 200, fmt.Sprintf("warm-base-%d", conc), baseline)
		// Interleave the two in short rounds (one operation each at concurrency 1) so that load
		// from elsewhere on a shared machine falls on both alike.
		rounds, n := 20, opsC16
		if conc == 1 {
			rounds, n = ops, ops
		}
		var o, r benchload.Result
		for round := 0; round < rounds; round++ {
			first, second := ours, baseline
			fo, so := &o, &r
			if round%2 == 1 {
				first, second, fo, so = baseline, ours, &r, &o
			}
			fo.Add(benchload.Run(b, conc, round*n/rounds, n/rounds, fmt.Sprintf("%p-%d", fo, conc), first))
			so.Add(benchload.Run(b, conc, round*n/rounds, n/rounds, fmt.Sprintf("%p-%d", so, conc), second))
		}
		if conc == 1 {
			b.ReportMetric(float64(o.Mean().Microseconds()), "claim_c1_us/op")
			b.ReportMetric(float64(r.Mean().Microseconds()), "baseline_c1_us/op")
			b.ReportMetric(float64(o.Mean())/float64(r.Mean()), "latency_ratio_c1")
			fmt.Printf("%s claim+complete c=1: ours %v/op, baseline %v/op, latency ratio %.2f (target ≤ 1.3)\n", b.Name(), o.Mean(), r.Mean(), float64(o.Mean())/float64(r.Mean()))
		} else {
			b.ReportMetric(o.PerSec(), "claim_c16_ops/s")
			b.ReportMetric(r.PerSec(), "baseline_c16_ops/s")
			b.ReportMetric(o.PerSec()/r.PerSec(), "throughput_ratio_c16")
			fmt.Printf("%s claim+complete c=16: ours %.0f ops/s, baseline %.0f ops/s, throughput ratio %.2f (target ≥ 0.85)\n", b.Name(), o.PerSec(), r.PerSec(), o.PerSec()/r.PerSec())
		}
	}
}

// BenchmarkOneCommit compares the one-commit path (RunLocal: claim, a business row and completion
// in one transaction) with raw SQL doing what a two-commit path does — the claim insert, then the
// business row and the completion in a second transaction — on a durable cluster at one client,
// where each commit's flush is the cost. Target: throughput ratio ≥ 1.8.
//
// This machine's disk flushes in a few hundred microseconds, less than one operation's statements,
// so one commit fewer cannot reach 1.8 here (the run prints the most it can reach). To show where
// it does, the same comparison runs again with a dearer flush: commit_delay with commit_siblings 0
// makes the server sleep before every WAL flush, as a flush to a network volume or the round trip
// to a synchronous standby in another zone would cost (+1, +3, +5 ms). Each flush setting is a
// sub-benchmark on the same cluster; keys differ by a prefix per setting.
func BenchmarkOneCommit(b *testing.B) {
	ops := benchload.EnvInt("IDEMOPS_BENCH_DURABLE_CLAIMS", 1000)
	url := durableURL(b)
	db, err := pgpool.Open(url)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Exec(`CREATE TABLE credits (id bigserial PRIMARY KEY, key_id bigint NOT NULL, amount bigint NOT NULL)`).Error; err != nil {
		b.Fatal(err)
	}
	for _, delay := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond} {
		name := "flush=disk"
		if delay > 0 {
			name += "+" + delay.String()
		}
		b.Run(name, func(b *testing.B) {
			// The durable cluster's superuser sets the delay; pg_reload_conf applies it to open
			// connections at their next statement.
			if err := db.Exec(fmt.Sprintf(`ALTER SYSTEM SET commit_delay = %d`, delay.Microseconds())).Error; err != nil {
				b.Fatal(err)
			}
			if err := db.Exec(`ALTER SYSTEM SET commit_siblings = 0`).Error; err != nil {
				b.Fatal(err)
			}
			if err := db.Exec(`SELECT pg_reload_conf()`).Error; err != nil {
				b.Fatal(err)
			}
			n := ops
			if delay > 0 {
				n = max(ops/2, 1) // each operation takes milliseconds here; the flush dominates its noise
			}
			oneCommitBench(b, db, name+"-", n)
		})
	}
}

func oneCommitBench(b *testing.B, db *gorm.DB, prefix string, ops int) {
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		b.Fatal(err)
	}
	sqlDB, _ := db.DB() // the baseline goes through the store's own pool
	spec := claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency"}
	body := []byte(`{"credit_id":"cr_1"}`)
	ours := func(ctx context.Context, tenant string, i int) error {
		out, err := store.RunLocal(ctx, claim.Request{Tenant: tenant, Operation: "credit.grant", Key: "k-" + strconv.Itoa(i),
			Intent: payment(100 + i), Spec: spec, Actor: "service:bench"},
			func(ctx context.Context, tx *gorm.DB, l *claim.Lease) (*claim.Snapshot, error) {
				if err := tx.Exec(`INSERT INTO credits (key_id, amount) VALUES (?, ?)`, l.KeyID, *l.Amount).Error; err != nil {
					return nil, err
				}
				return &claim.Snapshot{Status: 201, Body: body, ResourceID: "cr_1"}, nil
			})
		if err != nil {
			return err
		}
		if out.Kind != claim.Completed {
			return fmt.Errorf("unexpected %s", out.Kind)
		}
		return nil
	}
	baseline := func(ctx context.Context, tenant string, i int) error {
		id, err := rawClaim(ctx, sqlDB, tenant, "credit.grant", i)
		if err != nil {
			return err
		}
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO credits (key_id, amount) VALUES ($1, $2)`, id, 100+i); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `WITH u AS (UPDATE idempotency_keys SET state = 'completed', lease_token = NULL, lease_owner = NULL,
			lease_expires_at = NULL, resource_id = 'cr_1', response_day = (now() AT TIME ZONE 'UTC')::date,
			completed_at = now(), updated_at = now() WHERE id = $1 RETURNING id, response_day)
			INSERT INTO key_responses (key_id, day, status, body) SELECT id, response_day, 201, $2 FROM u`, id, body); err != nil {
			return err
		}
		return tx.Commit()
	}
	benchload.Run(b, 1, 0, 100, prefix+"warm-ours", ours)
	benchload.Run(b, 1, 0, 100, prefix+"warm-base", baseline)
	var o, r benchload.Result
	for i := 0; i < ops; i++ {
		first, second, fo, so := ours, baseline, &o, &r
		if i%2 == 1 {
			first, second, fo, so = baseline, ours, &r, &o
		}
		fo.Add(benchload.Run(b, 1, i, 1, fmt.Sprintf("%s%p", prefix, fo), first))
		so.Add(benchload.Run(b, 1, i, 1, fmt.Sprintf("%s%p", prefix, so), second))
	}
	flush := commitFlushCost(b, sqlDB)
	b.ReportMetric(o.PerSec(), "one_commit_ops/s")
	b.ReportMetric(r.PerSec(), "raw_two_commit_ops/s")
	b.ReportMetric(o.PerSec()/r.PerSec(), "throughput_ratio")
	// Saving one commit of two saves one flush: a path running the raw path's statements with one
	// commit fewer would take r.Mean() - flush, so that ratio is the most one commit can gain on
	// this disk. 1.8 needs a flush costing at least four times the statements of an operation.
	ceiling := float64(r.Mean()) / float64(max(r.Mean()-flush, 1))
	b.ReportMetric(float64(flush.Microseconds()), "commit_flush_us")
	b.ReportMetric(ceiling, "one_commit_ceiling")
	fmt.Printf("%s one-commit path (durable, c=1): ours %.0f ops/s, raw two-commit %.0f ops/s, ratio %.2f (target ≥ 1.8); "+
		"a commit's flush cost %v in this run (raw path %v/op), so one commit fewer can reach %.2f\n",
		b.Name(), o.PerSec(), r.PerSec(), o.PerSec()/r.PerSec(), flush.Round(time.Microsecond), r.Mean().Round(time.Microsecond), ceiling)
}

// commitFlushCost is what one commit's WAL flush costs on the durable cluster: 200 one-row
// inserts each committed alone, less the same inserts committed together, per commit.
func commitFlushCost(b *testing.B, db *sql.DB) time.Duration {
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS flush_probe (id bigserial PRIMARY KEY, v int)`); err != nil {
		b.Fatal(err)
	}
	const n = 200
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO flush_probe (v) VALUES ($1)`, i); err != nil {
			b.Fatal(err)
		}
	}
	alone := time.Since(start)
	start = time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := tx.ExecContext(ctx, `INSERT INTO flush_probe (v) VALUES ($1)`, i); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	together := time.Since(start)
	return max(0, (alone-together)/(n-1))
}

// rawClaim is the baseline's claim: the hand-written insert of key i of tenant's operation, no
// history, no retry loop.
func rawClaim(ctx context.Context, db *sql.DB, tenant, op string, i int) (int64, error) {
	var id int64
	key := "k-" + strconv.Itoa(i)
	err := db.QueryRowContext(ctx, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
		request, state, lease_owner, lease_token, lease_expires_at, downstream_key)
		VALUES ($1, $2, $3, $4, $5, 1, $6, 'processing', 'bench', gen_random_uuid(), now() + interval '30 seconds', $7)
		ON CONFLICT DO NOTHING RETURNING id`,
		tenant, op, key, claim.Digest(secret, tenant, op, key), "fp", string(payment(100+i)),
		claim.DownstreamKey(tenant, op, key)).Scan(&id)
	return id, err
}
