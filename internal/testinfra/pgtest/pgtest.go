// Package pgtest gives each test its own migrated PostgreSQL database, cloned from one template
// (pgtestdb), on the server named by DATABASE_URL or, when that is unset, on a private cluster
// that Main starts for the test binary from the machine's server binaries.
//
// `make test` starts one private cluster for the whole run and sets DATABASE_URL, so packages
// share it instead of each starting their own.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/peterldowns/pgtestdb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/migrations"
)

// Main runs the package's tests, starting a private cluster first when DATABASE_URL is unset
// (removed when they end). Without server binaries the package fails, naming what to install:
// a missing package is never a skip (`make prereqs` installs it).
func Main(m *testing.M) {
	os.Exit(run(m, nil))
}

// MainThen is Main with after called once the tests have run, while the cluster is still up
// (to drop what the package made outside its tests' own databases).
func MainThen(m *testing.M, after func()) {
	os.Exit(run(m, after))
}

func run(m *testing.M, after func()) int {
	if os.Getenv("DATABASE_URL") == "" {
		dir, err := pglocal.ScratchDir("idemops-test-pg-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		c, err := pglocal.Start(context.Background(), pglocal.Options{DataDir: dir + "/data", Fast: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer c.Remove()
		os.Setenv("DATABASE_URL", c.URL("postgres"))
	}
	code := m.Run()
	if after != nil {
		after()
	}
	return code
}

type migrator struct{}

func (migrator) Hash() (string, error) { return migrations.Hash() }
func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	return migrations.Up(ctx, db)
}

func baseConfig(t testing.TB) pgtestdb.Config {
	t.Helper()
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		t.Fatalf("pgtest: DATABASE_URL is unset; call pgtest.Main from TestMain")
	}
	pc, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatalf("pgtest: DATABASE_URL: %v", err)
	}
	opts := url.Values{"sslmode": {"disable"}}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       pc.Host,
		Port:       fmt.Sprint(pc.Port),
		User:       pc.User,
		Password:   pc.Password,
		Database:   pc.Database,
		Options:    opts.Encode(),
		// Tests that end with goroutines still holding connections must not fail the drop.
		ForceTerminateConnections: true,
	}
}

// URL creates a fresh migrated database for t and returns its connection string.
func URL(t testing.TB) string {
	t.Helper()
	base := baseConfig(t)
	// The tenant role exists before the template is migrated (the migration grants it the
	// tables), and the test role is a member of it (the console switches to it).
	roleOnce.Do(func() { roleErr = createTenantRole(base) })
	if roleErr != nil {
		t.Fatalf("pgtest: tenant role: %v", roleErr)
	}
	conf := pgtestdb.Custom(t, base, migrator{})
	memberOnce.Do(func() { memberErr = grantTenantRole(base, conf.User) })
	if memberErr != nil {
		t.Fatalf("pgtest: tenant role: %v", memberErr)
	}
	return conf.URL()
}

var (
	roleOnce, memberOnce sync.Once
	roleErr, memberErr   error
)

// createTenantRole makes migrations.TenantRole on the server as DATABASE_URL's (super)user,
// once for all the test binaries sharing the server.
func createTenantRole(base pgtestdb.Config) error {
	return onServer(base, fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN CREATE ROLE %s NOLOGIN NOSUPERUSER NOBYPASSRLS; END IF;
		END $$`, migrations.TenantRole, migrations.TenantRole))
}

// grantTenantRole makes user (the role tests connect as) a member of the tenant role.
func grantTenantRole(base pgtestdb.Config, user string) error {
	return onServer(base, fmt.Sprintf(`GRANT %s TO %q`, migrations.TenantRole, user))
}

// onServer runs q on DATABASE_URL's database under an advisory lock: role changes by test
// binaries running at once would otherwise collide.
func onServer(base pgtestdb.Config, q string) error {
	ctx := context.Background()
	db, err := base.Connect()
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(hashtext('idemops tenant role'))`); err != nil {
		return err
	}
	defer conn.ExecContext(ctx, `SELECT pg_advisory_unlock(hashtext('idemops tenant role'))`) //nolint:errcheck
	_, err = conn.ExecContext(ctx, q)
	return err
}

// Tenant opens the console's handle (internal/tenantdb: row-level security by the context's
// tenants) on the database db was opened on, closed at cleanup.
func Tenant(t testing.TB, db *gorm.DB) *gorm.DB {
	t.Helper()
	d, ok := db.Dialector.(*postgres.Dialector)
	if !ok || d.Config.DSN == "" {
		t.Fatalf("pgtest: Tenant needs a handle opened on a URL")
	}
	tdb, err := tenantdb.Open(d.Config.DSN)
	if err != nil {
		t.Fatalf("pgtest: open the tenant handle: %v", err)
	}
	t.Cleanup(func() {
		if sqlDB, err := tdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return tdb
}

// New creates a fresh migrated database for t and returns a gorm handle to it, closed at cleanup.
func New(t testing.TB) *gorm.DB {
	t.Helper()
	return Open(t, URL(t))
}

// Open opens the project's pool (pgpool.Open) on url — a database URL gave, or a server in
// front of one — for t, closed at cleanup.
func Open(t testing.TB, url string) *gorm.DB {
	t.Helper()
	db, err := pgpool.Open(url)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

// Empty creates a fresh database with no schema for t, for tests of the migrations themselves
// (they apply migrations.Provider step by step), and returns a gorm handle to it, closed at
// cleanup.
func Empty(t testing.TB) *gorm.DB {
	t.Helper()
	return Open(t, EmptyURL(t))
}

// EmptyURL creates a fresh database with no schema for t and returns its connection string (for
// a command that migrates it).
func EmptyURL(t testing.TB) string {
	t.Helper()
	return pgtestdb.Custom(t, baseConfig(t), pgtestdb.NoopMigrator{}).URL()
}

// Exec runs statements directly, for test set-up only (e.g. to age a lease).
func Exec(t testing.TB, db *gorm.DB, sql string, args ...any) {
	t.Helper()
	if err := db.Exec(sql, args...).Error; err != nil {
		t.Fatalf("pgtest: %s: %v", strings.TrimSpace(sql), err)
	}
}

// Unreachable returns a handle on a loopback port nothing listens on (every connection is
// refused, as while a primary is down), for tests of what an edge answers when the database
// cannot be reached, and that address, which no answer may name.
func Unreachable(t testing.TB) (*gorm.DB, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	db, err := gorm.Open(postgres.Open("postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=2"),
		&gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return db, addr
}
