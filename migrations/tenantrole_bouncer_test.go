package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/migrations"
)

// TestEnsureTenantRole_BehindPgbouncerLeavesNoLockBehind: consoles starting at once behind
// pgbouncer in transaction pooling (as `idemops chaos --cells` runs them) each finish. A
// session-level lock taken on one server connection and "released" on another stayed held by
// the pooled connection, and the next start waited on it for ever (the chaos run's console never
// came back after a restart).
func TestEnsureTenantRole_BehindPgbouncerLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	raw := pgtest.URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var port int
	fmt.Sscan(u.Port(), &port)
	b, err := pgha.StartBouncer(context.Background(), pgha.BouncerOptions{Host: u.Hostname(), Port: port, PoolSize: 2,
		Users: []string{u.User.Username()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	db, err := sql.Open("pgx", b.URL(u.User.Username(), u.Path[1:])+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(4)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := migrations.EnsureTenantRole(ctx, db); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("EnsureTenantRole behind pgbouncer: %v", err)
	}
	// Nothing of it is left held on the server.
	direct, err := sql.Open("pgx", raw)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var held int
	if err := direct.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d advisory locks still held after every EnsureTenantRole returned", held)
	}
}
