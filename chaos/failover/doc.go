// Package failover holds the HA failover test: the demo's payments world on the pg_auto_failover
// set of internal/pgha, whose primary is killed under traffic; no payment may execute twice and
// none may be lost. Beside it, the cells proof: two cells, each such a set, one cell's primary
// killed while the other cell's tenants must not notice, then a tenant moved between the cells
// under its traffic, executing nothing twice and losing nothing. It is its tests; nothing
// imports it.
// `make test` runs it last and alone (on 2 cores, a primary killed while other packages' tests
// compete for the CPU measures the machine):
//
//	go run ./cmd/withpg -- go test -count=1 -v -run Failover ./chaos/failover/
//	go run ./cmd/withpg -- go test -count=1 -v -run Cells ./chaos/failover/
package failover
