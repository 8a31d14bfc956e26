package console

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// benchRows is the benchmark's key count: 1M, or IDEMOPS_BENCH_ROWS (no fewer than least).
func benchRows(b *testing.B, least int) int {
	v := os.Getenv("IDEMOPS_BENCH_ROWS")
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		b.Fatalf("IDEMOPS_BENCH_ROWS=%q: want a number ≥ %d", v, least)
	}
	return n
}

// seedTenTenants inserts rows keys: key i is tenant-(i%10)'s, i seconds before epoch — only the
// tenants whose digit matches tenants (a regular expression; "" for all ten) — so databases
// seeded with the same epoch hold the same keys at the same times.
func seedTenTenants(b *testing.B, db *gorm.DB, rows int, epoch time.Time, tenants string) {
	b.Helper()
	if err := db.Exec(`INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
			request, state, downstream_key, amount_minor, currency, created_at, updated_at)
		SELECT 'tenant-' || (i % 10), (ARRAY['payment.charge','order.create','refund.create'])[1 + i % 3], 'key-' || i,
			md5(i::text) || md5('x' || i), md5('f' || i), 1,
			jsonb_build_object('amount', i % 10000, 'currency', 'USD'),
			(ARRAY['completed','completed','completed','failed_final','failed_retryable'])[1 + i % 5],
			md5('d' || i), i % 10000, 'USD', ?::timestamptz - i * interval '1 second', now()
		FROM generate_series(1, ?) AS i WHERE (i % 10)::text ~ ?`, epoch, rows, tenants).Error; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkKeySearchKeysetDeepPage compares page 1 of the key search with page 20,000 over 1M
// keys (IDEMOPS_BENCH_ROWS overrides the size; the deep page is then the last full one). The
// keyset (created_at, id) makes both an index descent plus 50 rows, so the ratio of their
// latencies should stay near 1 (target ≤ 1.5) and p99 ≤ 10 ms.
func BenchmarkKeySearchKeysetDeepPage(b *testing.B) {
	rows := benchRows(b, 2*PageSize)
	const samples = 200
	deepPage := min(20_000, rows/PageSize)
	db := pgtest.New(b)
	ctx := context.Background()

	start := time.Now()
	// One INSERT … SELECT: realistic rows (10 tenants, 3 operations, 4 states), one per second
	// of history, inserted in set-up only.
	if err := db.Exec(`INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
			request, state, downstream_key, amount_minor, currency, created_at, updated_at)
		SELECT 'tenant-' || (i % 10), (ARRAY['payment.charge','order.create','refund.create'])[1 + i % 3], 'key-' || i,
			md5(i::text) || md5('x' || i), md5('f' || i), 1,
			jsonb_build_object('amount', i % 10000, 'currency', 'USD', 'customer', jsonb_build_object('id', 'c' || (i % 5000))),
			(ARRAY['completed','completed','completed','failed_final','failed_retryable'])[1 + i % 5],
			md5('d' || i), i % 10000, 'USD', now() - i * interval '1 second', now()
		FROM generate_series(1, ?) AS i`, rows).Error; err != nil {
		b.Fatal(err)
	}
	if err := db.Exec(`ANALYZE idempotency_keys`).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("set-up: %d keys in %s", rows, time.Since(start).Round(time.Millisecond))

	// The cursor that page deepPage starts after: the last row of the page before it (OFFSET
	// here in set-up only, to find it; the search itself never uses OFFSET).
	var cur Cursor
	if err := db.Raw(`SELECT created_at, id FROM idempotency_keys ORDER BY created_at DESC, id DESC OFFSET ? LIMIT 1`,
		(deepPage-1)*PageSize-1).Row().Scan(&cur.CreatedAt, &cur.ID); err != nil {
		b.Fatal(err)
	}
	admin := &access.Operator{Role: access.RoleAdmin, Tenants: []string{access.AllTenants}}
	first, deep := KeyFilter{Limit: PageSize}, KeyFilter{Limit: PageSize, After: &cur}

	query := func(f KeyFilter) time.Duration {
		t0 := time.Now()
		got, _, err := SearchKeys(ctx, db, admin, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != PageSize {
			b.Fatalf("page has %d keys, want %d", len(got), PageSize)
		}
		return time.Since(t0)
	}
	for i := 0; i < 20; i++ { // warm the cache and the connection pool
		query(first)
		query(deep)
	}
	var firstTimes, deepTimes []time.Duration
	for i := 0; i < samples; i++ { // interleaved, so neither side gets a warmer machine
		firstTimes = append(firstTimes, query(first))
		deepTimes = append(deepTimes, query(deep))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		query(deep)
	}
	b.StopTimer()

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50f, p99f := percentile(firstTimes, 50), percentile(firstTimes, 99)
	p50d, p99d := percentile(deepTimes, 50), percentile(deepTimes, 99)
	b.ReportMetric(float64(rows), "keys")
	b.ReportMetric(float64(deepPage), "deep_page")
	b.ReportMetric(ms(p50f), "p50_page1_ms")
	b.ReportMetric(ms(p99f), "p99_page1_ms")
	b.ReportMetric(ms(p50d), "p50_deep_ms")
	b.ReportMetric(ms(p99d), "p99_deep_ms")
	b.ReportMetric(ms(p50d)/ms(p50f), "ratio_p50_deep/page1")
	b.ReportMetric(ms(p99d)/ms(p99f), "ratio_p99_deep/page1")
	b.Logf("page 1: p50 %.2f ms p99 %.2f ms; page %d: p50 %.2f ms p99 %.2f ms; ratio p50 %.2f (target ≤ 1.5), p99 target ≤ 10 ms",
		ms(p50f), ms(p99f), deepPage, ms(p50d), ms(p99d), ms(p50d)/ms(p50f))
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// BenchmarkFindByKey measures the header's find by key over 1M keys (IDEMOPS_BENCH_ROWS
// overrides), each raw key present in two tenants: random existing keys looked up as a "*"
// operator and as one limited to three tenants, plus missing keys. Target p99 ≤ 5 ms. It fails
// if the plan is not an index scan of the key column (migration 00035).
func BenchmarkFindByKey(b *testing.B) {
	rows := benchRows(b, 100)
	const samples = 300
	db := pgtest.New(b)
	ctx := context.Background()
	start := time.Now()
	// Row i has the key 'order-' || i/2, so every key is in two tenants (i%10 and (i+1)%10).
	if err := db.Exec(`INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
			request, state, downstream_key, created_at, updated_at)
		SELECT 'tenant-' || (i % 10), (ARRAY['payment.charge','order.create','refund.create'])[1 + i % 3], 'order-' || (i / 2),
			md5(i::text) || md5('x' || i), md5('f' || i), 1, '{"amount": 1}', 'completed', md5('d' || i),
			now() - i * interval '1 second', now()
		FROM generate_series(1, ?) AS i`, rows).Error; err != nil {
		b.Fatal(err)
	}
	if err := db.Exec(`ANALYZE idempotency_keys`).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("set-up: %d keys in %s", rows, time.Since(start).Round(time.Millisecond))
	var plan []string
	if err := db.Raw(`EXPLAIN SELECT id FROM idempotency_keys WHERE key = 'order-17' AND tenant IN ('tenant-1','tenant-2')
		ORDER BY tenant, operation, id LIMIT 100`).Scan(&plan).Error; err != nil {
		b.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "idempotency_keys_key_idx") {
		b.Fatalf("find by key is not served by the key index:\n%s", p)
	}
	all := &access.Operator{Role: access.RoleViewer, Tenants: []string{access.AllTenants}}
	some := &access.Operator{Role: access.RoleViewer, Tenants: []string{"tenant-1", "tenant-2", "tenant-3"}}
	rng := rand.New(rand.NewPCG(1, 2))
	query := func(op *access.Operator, key string) time.Duration {
		t0 := time.Now()
		if _, err := FindKeys(ctx, db, op, key); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	next := func() string { return "order-" + strconv.Itoa(1+rng.IntN(rows/2-1)) }
	for i := 0; i < 20; i++ {
		query(all, next())
	}
	if got, _ := FindKeys(ctx, db, all, "order-17"); len(got) != 2 {
		b.Fatalf("order-17 found %d times, want 2 (two tenants)", len(got))
	}
	var allT, someT, missT []time.Duration
	for i := 0; i < samples; i++ {
		allT = append(allT, query(all, next()))
		someT = append(someT, query(some, next()))
		missT = append(missT, query(all, "missing-"+strconv.Itoa(i)))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		query(all, next())
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(rows), "keys")
	b.ReportMetric(ms(percentile(allT, 50)), "p50_all_ms")
	b.ReportMetric(ms(percentile(allT, 99)), "p99_all_ms")
	b.ReportMetric(ms(percentile(someT, 99)), "p99_scoped_ms")
	b.ReportMetric(ms(percentile(missT, 99)), "p99_missing_ms")
	b.Logf("find by key over %d keys: * p50 %.2f ms p99 %.2f ms; 3 tenants p99 %.2f ms; missing p99 %.2f ms (target p99 ≤ 5 ms)",
		rows, ms(percentile(allT, 50)), ms(percentile(allT, 99)), ms(percentile(someT, 99)), ms(percentile(missT, 99)))
}

// BenchmarkKeySearchRowLevelSecurity measures what row-level security (migration 00118) costs the
// key search of an operator limited to 3 of 10 tenants over 1M keys (IDEMOPS_BENCH_ROWS
// overrides): the baseline is the search as before, on the tables' owner handle with the Go scope
// alone; against it, the same search on the console's handle (internal/tenantdb: the operator's
// tenants set per statement, the policies applied). Both pages, first and a filtered one,
// interleaved. Target: p50 with row-level security ≤ 1.1× the baseline.
func BenchmarkKeySearchRowLevelSecurity(b *testing.B) {
	rows := benchRows(b, 60*PageSize)
	const samples = 300
	db := pgtest.New(b)
	rls := pgtest.Tenant(b, db)
	start := time.Now()
	seedTenTenants(b, db, rows, time.Now(), "")
	if err := db.Exec(`ANALYZE idempotency_keys`).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("set-up: %d keys in %s", rows, time.Since(start).Round(time.Millisecond))

	op := &access.Operator{Role: access.RoleViewer, Tenants: []string{"tenant-1", "tenant-2", "tenant-3"}}
	ctx := access.Bind(context.Background(), op)
	first := KeyFilter{Limit: PageSize}
	filtered := KeyFilter{Limit: PageSize, Operation: "refund.create", State: "failed_final"}
	query := func(on *gorm.DB, f KeyFilter) time.Duration {
		t0 := time.Now()
		got, _, err := SearchKeys(ctx, on, op, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != PageSize {
			b.Fatalf("page has %d keys, want %d", len(got), PageSize)
		}
		for _, k := range got {
			if !slices.Contains(op.Tenants, k.Tenant) {
				b.Fatalf("key of %s in the search of %v", k.Tenant, op.Tenants)
			}
		}
		return time.Since(t0)
	}
	for i := 0; i < 30; i++ { // warm the cache, the pools and the connections' descriptions
		query(db, first)
		query(rls, first)
		query(db, filtered)
		query(rls, filtered)
	}
	var base, with, baseF, withF []time.Duration
	for i := 0; i < samples; i++ { // interleaved, so neither side gets a warmer machine
		base = append(base, query(db, first))
		with = append(with, query(rls, first))
		baseF = append(baseF, query(db, filtered))
		withF = append(withF, query(rls, filtered))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		query(rls, first)
	}
	b.StopTimer()

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ratio := ms(percentile(with, 50)) / ms(percentile(base, 50))
	ratioF := ms(percentile(withF, 50)) / ms(percentile(baseF, 50))
	b.ReportMetric(float64(rows), "keys")
	b.ReportMetric(ms(percentile(base, 50)), "p50_go_scope_ms")
	b.ReportMetric(ms(percentile(with, 50)), "p50_rls_ms")
	b.ReportMetric(ms(percentile(baseF, 50)), "p50_filtered_go_scope_ms")
	b.ReportMetric(ms(percentile(withF, 50)), "p50_filtered_rls_ms")
	b.ReportMetric(ratio, "ratio_p50_rls/go_scope")
	b.ReportMetric(ratioF, "ratio_p50_filtered_rls/go_scope")
	b.Logf("key search, 3 of 10 tenants, %d keys: page 1 p50 %.2f ms → %.2f ms with row-level security (×%.2f), p99 %.2f → %.2f ms; "+
		"filtered p50 %.2f → %.2f ms (×%.2f); target ≤ ×1.1",
		rows, ms(percentile(base, 50)), ms(percentile(with, 50)), ratio, ms(percentile(base, 99)), ms(percentile(with, 99)),
		ms(percentile(baseF, 50)), ms(percentile(withF, 50)), ratioF)
}
