package console

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// BenchmarkKeySearchAcrossCells measures what the console's fan-out costs the keys list's first
// page of an all-tenants operator: the baseline is one database holding 1M keys of 10 tenants
// (IDEMOPS_BENCH_ROWS overrides), against the same rows split over two cells (tenants 0–4 in
// a, 5–9 in b), each asked at once for its tenants' page and the pages merged by (created_at,
// id) — Server.searchKeys both, on the console's tenant handles. Interleaved; reported as the
// ratio of the two-cell p50 (and p99) to the one-database one.
func BenchmarkKeySearchAcrossCells(b *testing.B) {
	rows := benchRows(b, 20*PageSize)
	const samples = 300
	epoch := time.Now().UTC().Truncate(time.Second) // every database's rows counted back from it
	seed := func(db *gorm.DB, tenants string) {
		seedTenTenants(b, db, rows, epoch, tenants)
		if err := db.Exec(`ANALYZE idempotency_keys`).Error; err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	one, a, bb := pgtest.New(b), pgtest.New(b), pgtest.New(b)
	seed(one, "^[0-9]$")
	seed(a, "^[0-4]$")
	seed(bb, "^[5-9]$")
	b.Logf("set-up: %d keys in one database and split over two in %s", rows, time.Since(start).Round(time.Millisecond))

	single := &Server{cells: &cellSet{all: []*cell{{db: pgtest.Tenant(b, one)}}}}
	ca, cb := &cell{name: "a", db: pgtest.Tenant(b, a)}, &cell{name: "b", db: pgtest.Tenant(b, bb)}
	place := map[string]string{}
	for i := range 10 {
		place["tenant-"+strconv.Itoa(i)] = map[bool]string{true: "a", false: "b"}[i < 5]
	}
	split := &Server{cells: &cellSet{cells: &testCells{cells: []TenantCell{{Name: "a", DB: ca.db}, {Name: "b", DB: cb.db}}, place: place},
		all: []*cell{ca, cb}, byName: map[string]*cell{"a": ca, "b": cb}}}

	// The one database behind a map of one cell: the fan-out's own path (each cell asked for the
	// tenants it holds), with nothing split — what the map costs apart from the second cell.
	cOne := &cell{name: "a", db: single.cells.all[0].db}
	mapped := &Server{cells: &cellSet{cells: &testCells{cells: []TenantCell{{Name: "a", DB: cOne.db}}, place: maps.Collect(func(yield func(string, string) bool) {
		for t := range place {
			if !yield(t, "a") {
				return
			}
		}
	})}, all: []*cell{cOne}, byName: map[string]*cell{"a": cOne}}}

	op := &access.Operator{Role: access.RoleAdmin, Tenants: []string{access.AllTenants}}
	ctx := access.Bind(context.Background(), op)
	first := KeyFilter{Limit: PageSize}
	want, _, err := single.searchKeys(ctx, op, first)
	if err != nil || len(want) != PageSize {
		b.Fatalf("one database's first page: %d keys, %v", len(want), err)
	}
	query := func(s *Server) time.Duration {
		t0 := time.Now()
		got, _, err := s.searchKeys(ctx, op, first)
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != len(want) {
			b.Fatalf("page has %d keys, want %d", len(got), len(want))
		}
		for i := range got { // the same keys in the same order: created_at, then the key
			if got[i].Key != want[i].Key || got[i].Tenant != want[i].Tenant {
				b.Fatalf("row %d: %s/%s, want %s/%s", i, got[i].Tenant, got[i].Key, want[i].Tenant, want[i].Key)
			}
		}
		return d
	}
	for range 30 { // warm the caches, the pools and the connections' descriptions
		query(single)
		query(mapped)
		query(split)
	}
	var oneT, mapT, twoT []time.Duration
	for range samples { // interleaved, so no side gets a warmer machine
		oneT = append(oneT, query(single))
		mapT = append(mapT, query(mapped))
		twoT = append(twoT, query(split))
	}
	b.ResetTimer()
	for range b.N {
		query(split)
	}
	b.StopTimer()

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50, p99 := ms(percentile(twoT, 50))/ms(percentile(oneT, 50)), ms(percentile(twoT, 99))/ms(percentile(oneT, 99))
	b.ReportMetric(float64(rows), "keys")
	b.ReportMetric(ms(percentile(oneT, 50)), "p50_one_cell_ms")
	b.ReportMetric(ms(percentile(twoT, 50)), "p50_two_cells_ms")
	b.ReportMetric(ms(percentile(oneT, 99)), "p99_one_cell_ms")
	b.ReportMetric(ms(percentile(twoT, 99)), "p99_two_cells_ms")
	b.ReportMetric(ms(percentile(mapT, 50)), "p50_one_cell_mapped_ms")
	b.ReportMetric(ms(percentile(mapT, 50))/ms(percentile(oneT, 50)), "ratio_p50_mapped/one")
	b.ReportMetric(p50, "ratio_p50_two/one")
	b.ReportMetric(p99, "ratio_p99_two/one")
	b.Logf("keys list first page, all tenants, %d keys: one database p50 %.2f ms p99 %.2f ms; the same behind a one-cell map p50 %.2f ms (×%.2f); "+
		"split over two cells p50 %.2f ms p99 %.2f ms (×%.2f p50, ×%.2f p99)",
		rows, ms(percentile(oneT, 50)), ms(percentile(oneT, 99)), ms(percentile(mapT, 50)), ms(percentile(mapT, 50))/ms(percentile(oneT, 50)),
		ms(percentile(twoT, 50)), ms(percentile(twoT, 99)), p50, p99)
}
