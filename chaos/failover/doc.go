// Package failover holds the HA failover test: the demo's payments world on the pg_auto_failover
// set of internal/pgha, whose primary is killed under traffic; no payment may execute twice and
// none may be lost. It is its test; nothing imports it. `make test` runs it last and alone (on 2
// cores, a primary killed while other packages' tests compete for the CPU measures the machine):
//
//	go run ./cmd/withpg -- go test -count=1 -v -run Failover ./chaos/failover/
package failover
