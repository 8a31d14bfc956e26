package tenantdb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// seedKeys stores one key per tenant, as a service (the tables' owner) does.
func seedKeys(t *testing.T, db *gorm.DB, tenants ...string) {
	t.Helper()
	for i, tn := range tenants {
		pgtest.Exec(t, db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
			request, state, downstream_key) VALUES (?, 'payment.charge', ?, ?, 'f', 1, '{}', 'completed', ?)`,
			tn, fmt.Sprintf("k-%d", i), fmt.Sprintf("d-%d", i), fmt.Sprintf("dk-%s-%d", tn, i))
	}
}

var (
	acme   = tenantdb.WithTenants(context.Background(), []string{"acme"})
	globex = tenantdb.WithTenants(context.Background(), []string{"globex"})
	both   = tenantdb.WithTenants(context.Background(), []string{"acme", "globex"})
	every  = tenantdb.WithTenants(context.Background(), []string{"*"})
	none   = context.Background()
)

// tenantsSeen lists the tenants of the keys a query under ctx returns.
func tenantsSeen(t *testing.T, db *gorm.DB, ctx context.Context) string {
	t.Helper()
	var ts []string
	if err := db.WithContext(ctx).Raw(`SELECT tenant FROM idempotency_keys ORDER BY tenant`).Scan(&ts).Error; err != nil {
		t.Fatal(err)
	}
	return strings.Join(ts, ",")
}

// Every statement and transaction sees the rows of the tenants its context carries: a lone
// query, one inside a transaction, an update; none without tenants; all with "*".
func TestTenantDB_StatementsSeeTheirContextsTenantsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seedKeys(t, db, "acme", "globex", "initech")
	tdb := pgtest.Tenant(t, db)
	for name, tc := range map[string]struct {
		ctx  context.Context
		want string
	}{
		"acme": {acme, "acme"}, "acme and globex": {both, "acme,globex"}, "every tenant": {every, "acme,globex,initech"},
		"no tenants": {none, ""},
	} {
		if got := tenantsSeen(t, tdb, tc.ctx); got != tc.want {
			t.Errorf("%s, a lone query: %q, want %q", name, got, tc.want)
		}
		err := tdb.WithContext(tc.ctx).Transaction(func(tx *gorm.DB) error {
			if got := tenantsSeen(t, tx, tc.ctx); got != tc.want {
				t.Errorf("%s, in a transaction: %q, want %q", name, got, tc.want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	res := tdb.WithContext(acme).Exec(`UPDATE idempotency_keys SET needs_attention = true`)
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("acme's update: %v, %d rows, want 1", res.Error, res.RowsAffected)
	}
	if err := tdb.WithContext(acme).Exec(`UPDATE idempotency_keys SET tenant = 'globex' WHERE tenant = 'acme'`).Error; err == nil {
		t.Error("acme moved its key to globex")
	}
	if got := tenantsSeen(t, db, every); got != "acme,globex,initech" {
		t.Errorf("the owner sees %q", got)
	}
}

// session is what a connection carries between transactions.
type session struct {
	PID     int64
	User    string
	Tenants string
}

// A transaction's role and tenants end with it: on a pool of one connection, whatever came
// before — a lone statement, a committed or rolled-back transaction, a failed statement, a
// panic inside a transaction, a query cancelled mid-way, rows closed early — the next
// transaction of another operator (or of every tenant) finds the connection as the login left
// it and sees only its own rows.
func TestTenantDB_SettingsDoNotLeakIntoTheNextTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seedKeys(t, db, "acme", "globex", "initech")
	tdb := pgtest.Tenant(t, db)
	sqlDB, _ := tdb.DB()
	sqlDB.SetMaxOpenConns(1)
	var first session
	look := func(what string) {
		t.Helper()
		var s session
		if err := tdb.WithContext(every).Raw(`SELECT pg_backend_pid() AS pid, current_user AS user,
			COALESCE(current_setting('idemops.tenants', true), '') AS tenants`).Scan(&s).Error; err != nil {
			t.Fatalf("after %s: %v", what, err)
		}
		if first.PID == 0 {
			first = s
		}
		if s.User != first.User || s.Tenants != "" || s.User == "idemops_console" {
			t.Errorf("after %s the connection carries %+v, want the login with no tenants", what, s)
		}
		if s.PID != first.PID {
			t.Logf("after %s: a new connection (%d, was %d)", what, s.PID, first.PID)
			first.PID = s.PID
		}
		if got := tenantsSeen(t, tdb, globex); got != "globex" {
			t.Errorf("after %s globex sees %q", what, got)
		}
		if got := tenantsSeen(t, tdb, none); got != "" {
			t.Errorf("after %s a context without tenants sees %q", what, got)
		}
	}
	look("nothing")
	steps := []struct {
		what string
		do   func()
	}{
		{"acme's lone query", func() { tenantsSeen(t, tdb, acme) }},
		{"acme's update", func() { tdb.WithContext(acme).Exec(`UPDATE idempotency_keys SET attempts = attempts + 1`) }},
		{"acme's committed transaction", func() {
			_ = tdb.WithContext(acme).Transaction(func(tx *gorm.DB) error { return tx.Exec(`SELECT 1`).Error })
		}},
		{"acme's transaction rolled back", func() {
			_ = tdb.WithContext(acme).Transaction(func(tx *gorm.DB) error { return errors.New("no") })
		}},
		{"a failed statement in acme's transaction", func() {
			_ = tdb.WithContext(acme).Transaction(func(tx *gorm.DB) error { return tx.Exec(`SELECT 1/0`).Error })
		}},
		{"acme's failed lone statement", func() { tdb.WithContext(acme).Exec(`SELECT 1/0`) }},
		{"a panic in acme's transaction", func() {
			defer func() { _ = recover() }()
			_ = tdb.WithContext(acme).Transaction(func(tx *gorm.DB) error { tx.Exec(`SELECT 1`); panic("boom") })
		}},
		{"acme's query cancelled mid-way", func() {
			ctx, cancel := context.WithTimeout(acme, 50*time.Millisecond)
			defer cancel()
			tdb.WithContext(ctx).Exec(`SELECT pg_sleep(5)`)
		}},
		{"acme's transaction cancelled mid-way", func() {
			ctx, cancel := context.WithTimeout(acme, 50*time.Millisecond)
			defer cancel()
			_ = tdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return tx.Exec(`SELECT pg_sleep(5)`).Error })
		}},
		{"acme's rows closed early", func() {
			rows, err := tdb.WithContext(acme).Raw(`SELECT generate_series(1, 100000)`).Rows()
			if err != nil {
				t.Fatal(err)
			}
			rows.Next()
			rows.Close()
		}},
		{"every tenant's query", func() { tenantsSeen(t, tdb, every) }},
	}
	for _, st := range steps {
		st.do()
		look(st.what)
	}
}

// Behind pgbouncer in transaction mode (one server connection, no reset query between
// clients), operators of different tenants and the login itself share the server connection
// transaction by transaction, at the same time: none ever sees another's rows or finds another's
// role or tenants set.
func TestTenantDB_BehindPgbouncerNothingLeaksBetweenClients(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seedKeys(t, db, "acme", "globex", "initech")
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var port int
	fmt.Sscan(u.Port(), &port)
	// The database of db: the one URL above is another (each URL is a fresh database).
	var name string
	db.Raw(`SELECT current_database()`).Scan(&name)
	b, err := pgha.StartBouncer(context.Background(), pgha.BouncerOptions{Host: u.Hostname(), Port: port, PoolSize: 1,
		Users: []string{u.User.Username()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	dsn := b.URL(u.User.Username(), name) + "&default_query_exec_mode=exec"
	var pools []*gorm.DB
	for range 3 {
		p, err := tenantdb.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := p.DB()
		sqlDB.SetMaxOpenConns(3)
		t.Cleanup(func() { sqlDB.Close() })
		pools = append(pools, p)
	}
	clients := []struct {
		ctx  context.Context
		want string
	}{{acme, "acme"}, {globex, "globex"}, {every, "acme,globex,initech"}, {none, ""}, {both, "acme,globex"}}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i, c := range clients {
		for j := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := pools[(i+j)%len(pools)]
				for k := range 40 {
					var got []string
					var err error
					if k%2 == 0 {
						err = p.WithContext(c.ctx).Raw(`SELECT tenant FROM idempotency_keys ORDER BY tenant`).Scan(&got).Error
					} else {
						err = p.WithContext(c.ctx).Transaction(func(tx *gorm.DB) error {
							return tx.Raw(`SELECT tenant FROM idempotency_keys ORDER BY tenant`).Scan(&got).Error
						})
					}
					if err != nil {
						errs <- err
						return
					}
					if strings.Join(got, ",") != c.want {
						errs <- fmt.Errorf("a client of %q saw %v", c.want, got)
						return
					}
					if c.want == "acme,globex,initech" { // the login: nothing of anyone's transaction left on the server connection
						var s session
						if err := p.WithContext(c.ctx).Raw(`SELECT current_user AS user,
							COALESCE(current_setting('idemops.tenants', true), '') AS tenants`).Scan(&s).Error; err != nil {
							errs <- err
							return
						}
						if s.User == "idemops_console" || s.Tenants != "" {
							errs <- fmt.Errorf("the login found %+v on its server connection", s)
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A scoped statement reads exactly like one through pgx's database/sql driver: the same Go
// values for every column type the project stores, NULLs included, and its arguments go in the
// same way.
func TestTenantDB_ReadsLikePgxStdlib(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	tdb := pgtest.Tenant(t, db)
	plain, _ := db.DB()
	scoped, _ := tdb.DB()
	q := `SELECT true, false, '\x00ff'::bytea, 7::int2, 70000::int4, 9000000000::int8, 1.5::float4, 2.25::float8,
		12.340::numeric, 'text', 'v'::varchar, '{"a": [1, 2.0]}'::jsonb, '{"b":1}'::json,
		'2024-03-01 12:34:56.789012+08'::timestamptz, '2024-03-01 12:34:56'::timestamp, '2024-03-01'::date,
		'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '{acme,"a b",NULL}'::text[], '{1,2}'::int8[], '1 day 2 hours'::interval,
		NULL::text, NULL::int8, $1::text, $2::int8, $3::timestamptz, $4::bytea, $5::jsonb, $6::bool`
	args := []any{"arg", int64(42), time.Date(2024, 3, 1, 1, 2, 3, 4000, time.UTC), []byte{1, 2}, []byte(`{"x":1}`), true}
	read := func(d *sql.DB, ctx context.Context) []any {
		t.Helper()
		rows, err := d.QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if !rows.Next() {
			t.Fatalf("no row: %v", rows.Err())
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		return vals
	}
	want, got := read(plain, context.Background()), read(scoped, acme)
	for i := range want {
		if !reflect.DeepEqual(want[i], got[i]) {
			t.Errorf("column %d: scoped %#v (%T), pgx's stdlib %#v (%T)", i+1, got[i], got[i], want[i], want[i])
		}
	}
	var n int64
	res, err := scoped.ExecContext(acme, `UPDATE idempotency_keys SET attempts = attempts WHERE id = $1`, n)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := res.RowsAffected(); k != 0 {
		t.Errorf("rows affected %d", k)
	}
}
