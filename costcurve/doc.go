// Package costcurve holds the cost-curve benchmarks: every operator-side path whose cost could
// grow with the keys table (the console's search, find by key, dashboard, keys needing
// attention, the retention preview, reconciliation's matching, the reclaimer's scan, the purge
// of a day), measured over 100k, 1M and (when asked for) 10M keys of 100 tenants seeded by COPY.
// The package is its benchmarks; nothing imports it.
//
//	go run ./cmd/withpg --shared-buffers 4GB -- go test ./costcurve -run '^$' -bench . -benchtime 1x
//	IDEMOPS_BENCH_SIZES=100k,1M,10M go run ./cmd/withpg --shared-buffers 4GB -- go test ./costcurve -run '^$' -bench . -benchtime 1x -timeout 6h
//
// docs/SCALING.md has the table of their results and each path's growth shape.
package costcurve
