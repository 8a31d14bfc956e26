package pgtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/idemops/idemops/migrations"
)

// notifyChannel is the channel a test database's tables notify on when a statement changed them.
const notifyChannel = "pgtest_changes"

// Await waits until cond holds, re-checking it each time a committed statement changed one of
// tables in db's database: a wait on a signal (LISTEN/NOTIFY, through a statement trigger that
// only this test's database gets), not a poll. It fails t after timeout naming what it waited
// for. cond reads committed state, so the write it waits for has committed when it returns.
func Await(t testing.TB, db *gorm.DB, timeout time.Duration, what string, cond func() bool, tables ...string) {
	t.Helper()
	if len(tables) == 0 {
		t.Fatal("pgtest.Await: name the tables whose changes may make cond hold")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn := listen(t, ctx, db, tables)
	defer conn.Close(context.Background())
	for !cond() {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

// listen installs the notify triggers on tables (once per database and table) and returns a
// connection that listens on notifyChannel. The LISTEN is in place before Await first checks its
// condition, so no change between the check and the wait is missed.
func listen(t testing.TB, ctx context.Context, db *gorm.DB, tables []string) *pgx.Conn {
	t.Helper()
	d, ok := db.Dialector.(*postgres.Dialector)
	if !ok {
		t.Fatalf("pgtest.Await: a handle from pgtest.New is needed, not %T", db.Dialector)
	}
	conn, err := pgx.Connect(ctx, d.Config.DSN)
	if err != nil {
		t.Fatalf("pgtest.Await: connect: %v", err)
	}
	var b strings.Builder
	// One catalog writer at a time: CREATE OR REPLACE of one function or trigger by two sessions
	// at once, or a table's first trigger (pg_class.relhastriggers) while the console's start-up
	// grants on every table (migrations.EnsureTenantRole rewrites every pg_class row), fails with
	// "tuple concurrently updated". Both take migrations.GrantLock.
	fmt.Fprintf(&b, "SELECT pg_advisory_xact_lock(hashtext(%s));\n", quoteLiteral(migrations.GrantLock))
	b.WriteString(`CREATE OR REPLACE FUNCTION pgtest_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('` + notifyChannel + `', TG_TABLE_NAME); RETURN NULL; END $$;
`)
	for _, tbl := range tables {
		fmt.Fprintf(&b, "CREATE OR REPLACE TRIGGER pgtest_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION pgtest_notify();\n",
			pgx.Identifier{tbl}.Sanitize())
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, b.String())
		return err
	}); err != nil {
		conn.Close(context.Background())
		t.Fatalf("pgtest.Await: notify triggers on %v: %v", tables, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		conn.Close(context.Background())
		t.Fatalf("pgtest.Await: listen: %v", err)
	}
	return conn
}

// SleepUntil waits until the moment the query returns (one timestamptz: a deadline the code
// under test wrote, such as a lease's expiry or a row's next attempt), by PostgreSQL's clock,
// then a little more; it returns at once for NULL or a moment past. Time passing is the one
// thing no statement signals, so this is a sleep — to the deadline, not a poll.
func SleepUntil(t testing.TB, db *gorm.DB, query string, args ...any) {
	t.Helper()
	var left *float64
	if err := db.Raw(`SELECT EXTRACT(EPOCH FROM (`+query+`) - clock_timestamp())::float8`, args...).Scan(&left).Error; err != nil {
		t.Fatalf("pgtest.SleepUntil: %v", err)
	}
	if left == nil || *left <= 0 {
		return
	}
	if *left > 60 {
		t.Fatalf("pgtest.SleepUntil: the deadline is %.0f s away", *left)
	}
	// The deadline is PostgreSQL's; 20 ms more covers the statement that reads it back.
	time.Sleep(time.Duration(*left*float64(time.Second)) + 20*time.Millisecond)
}

// AwaitLockWait waits until a backend of db's database other than those in except waits on a
// lock while running a statement containing query (another transaction holds the row or
// table), and returns its pid. PostgreSQL signals nothing when a backend starts to wait, so
// this polls pg_stat_activity.
func AwaitLockWait(t testing.TB, db *gorm.DB, timeout time.Duration, query string, except ...int) int {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; {
		var pids []int
		if err := db.Raw(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE ?`, "%"+query+"%").Scan(&pids).Error; err != nil {
			t.Fatalf("pgtest.AwaitLockWait: %v", err)
		}
		for _, pid := range pids {
			if !slices.Contains(except, pid) {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement like %q waited on a lock within %s", query, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polled: no event marks a backend starting to wait on a lock
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
