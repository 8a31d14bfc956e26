package claim_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/pgtest"
)

// BenchmarkClaimComplete compares claim+complete through the claim package with a raw pgx
// baseline (INSERT … ON CONFLICT DO NOTHING RETURNING, then UPDATE) on the same table of the same
// database, at concurrency 1 (latency) and 16 (throughput). Targets: latency ratio ≤ 1.3 at 1,
// throughput ratio ≥ 0.85 at 16.
func BenchmarkClaimComplete(b *testing.B) {
	ops := envInt("IDEMOPS_BENCH_CLAIMS", 4000)
	url := pgtest.URL(b)
	db, err := pglocal.Open(url)
	if err != nil {
		b.Fatal(err)
	}
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
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
		var id int64
		key := "k-" + strconv.Itoa(i)
		err := pool.QueryRow(ctx, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
			request, state, lease_owner, lease_token, lease_expires_at, downstream_key)
			VALUES ($1, 'payment.charge', $2, $3, $4, 1, $5, 'processing', 'bench', gen_random_uuid(), now() + interval '30 seconds', $6)
			ON CONFLICT (tenant, operation, key) DO NOTHING RETURNING id`,
			tenant, key, claim.Digest(secret, tenant, "payment.charge", key), "fp", string(payment(100+i)),
			claim.DownstreamKey(tenant, "payment.charge", key)).Scan(&id)
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'completed', lease_token = NULL, lease_owner = NULL,
			lease_expires_at = NULL, response_status = $2, response_headers = $3, response_body = $4, resource_id = $5,
			completed_at = now(), updated_at = now() WHERE id = $1`,
			id, snap.Status, `{"Content-Type":"application/json"}`, snap.Body, snap.ResourceID)
		return err
	}

	for _, conc := range []int{1, 16} {
		// Warm both paths (connections, statement caches) before measuring.
		runLoad(b, conc, 200, fmt.Sprintf("warm-ours-%d", conc), ours)
		runLoad(b, conc, 200, fmt.Sprintf("warm-base-%d", conc), baseline)
		o := runLoad(b, conc, ops, fmt.Sprintf("ours-%d", conc), ours)
		r := runLoad(b, conc, ops, fmt.Sprintf("base-%d", conc), baseline)
		if conc == 1 {
			b.ReportMetric(float64(o.mean.Microseconds()), "claim_c1_us/op")
			b.ReportMetric(float64(r.mean.Microseconds()), "baseline_c1_us/op")
			b.ReportMetric(float64(o.mean)/float64(r.mean), "latency_ratio_c1")
			fmt.Printf("claim+complete c=1: ours %v/op, baseline %v/op, latency ratio %.2f (target ≤ 1.3)\n", o.mean, r.mean, float64(o.mean)/float64(r.mean))
		} else {
			b.ReportMetric(o.perSec, "claim_c16_ops/s")
			b.ReportMetric(r.perSec, "baseline_c16_ops/s")
			b.ReportMetric(o.perSec/r.perSec, "throughput_ratio_c16")
			fmt.Printf("claim+complete c=16: ours %.0f ops/s, baseline %.0f ops/s, throughput ratio %.2f (target ≥ 0.85)\n", o.perSec, r.perSec, o.perSec/r.perSec)
		}
	}
}

type loadResult struct {
	mean, p99 time.Duration
	perSec    float64
}

func runLoad(b *testing.B, conc, n int, tenant string, fn func(context.Context, string, int) error) loadResult {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := fn(ctx, tenant, i); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return loadResult{mean: sum / time.Duration(n), p99: lat[n*99/100], perSec: float64(n) / elapsed.Seconds()}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
