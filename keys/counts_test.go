package keys_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// seedSpread inserts n keys created over the last `over` (newest now), of three tenants, two
// operations and three states, each stamped as a claim stamps it (updated_at = created_at).
func (b *bundle) seedSpread(n int, over time.Duration, prefix string) {
	b.t.Helper()
	pgtest.Exec(b.t, b.db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
		request, state, downstream_key, created_at, updated_at)
		SELECT 'tenant-' || (i % 3), CASE WHEN i % 5 = 0 THEN 'refund.create' ELSE 'payment.charge' END, ? || i,
			md5(? || i) || md5(i::text), md5(i::text), 1, '{}',
			CASE WHEN i % 7 = 0 THEN 'failed_final' WHEN i % 11 = 0 THEN 'failed_retryable' ELSE 'completed' END,
			? || i, t, t
		FROM generate_series(1, ?) i, LATERAL (SELECT now() - ? * interval '1 second' * (i::float8 / ?)) x (t)`,
		prefix, prefix, prefix, n, over.Seconds(), n)
}

// liveByState is CountByState's answer read from the keys alone.
func (b *bundle) liveByState(scope keys.Scope, window time.Duration) []keys.StateCount {
	b.t.Helper()
	cond, args, _ := scope.SQL()
	var rows []keys.StateCount
	if err := b.db.Raw(`SELECT operation, state, count(*) AS n FROM idempotency_keys WHERE `+cond+`
		AND created_at > now() - ? * interval '1 second' GROUP BY 1, 2 ORDER BY 1, 2`, append(args, window.Seconds())...).Scan(&rows).Error; err != nil {
		b.t.Fatal(err)
	}
	return rows
}

func (b *bundle) livePerMinute(scope keys.Scope) []keys.MinuteCount {
	b.t.Helper()
	cond, args, _ := scope.SQL()
	var rows []keys.MinuteCount
	if err := b.db.Raw(`SELECT date_trunc('minute', created_at, 'UTC') AS minute, count(*) AS n FROM idempotency_keys WHERE `+cond+`
		AND created_at > now() - interval '1 hour' GROUP BY 1 ORDER BY 1`, args...).Scan(&rows).Error; err != nil {
		b.t.Fatal(err)
	}
	return rows
}

// checkCounts compares the folded counts with a live count in one transaction (one now(), one
// snapshot), for several scopes and windows.
func (b *bundle) checkCounts(when string) {
	b.t.Helper()
	if err := keys.FoldCounts(ctx, b.db); err != nil {
		b.t.Fatal(err)
	}
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`).Error; err != nil {
			return err
		}
		inner := &bundle{t: b.t, db: tx}
		for _, scope := range []keys.Scope{keys.AllTenants(), {Tenants: []string{"tenant-1"}}, {Tenants: []string{"tenant-0", "tenant-2"}}} {
			for _, window := range []time.Duration{24 * time.Hour, 30 * time.Hour, 150 * time.Minute, 7 * time.Minute, 90 * time.Second} {
				got, err := keys.CountByState(ctx, tx, scope, window)
				if err != nil {
					return err
				}
				if want := inner.liveByState(scope, window); !slices.Equal(got, want) {
					b.t.Errorf("%s: %v over %s: folded %v, live %v", when, scope, window, got, want)
				}
			}
			got, err := keys.ClaimsPerMinute(ctx, tx, scope)
			if err != nil {
				return err
			}
			want := inner.livePerMinute(scope)
			if !slices.EqualFunc(got, want, func(a, b keys.MinuteCount) bool { return a.Minute.Equal(b.Minute) && a.N == b.N }) {
				b.t.Errorf("%s: %v per minute: folded %v, live %v", when, scope, got, want)
			}
		}
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

// foldAll folds until key_counts has caught up with the keys (an hour per fold).
func (b *bundle) foldAll() {
	b.t.Helper()
	for range 30 {
		if err := keys.FoldCounts(ctx, b.db); err != nil {
			b.t.Fatal(err)
		}
	}
}

// foldState is key_count_folds' row and how many rows of each width key_counts holds.
func (b *bundle) foldState() (settled time.Time, minutes, hours int64) {
	b.t.Helper()
	if err := b.db.Raw(`SELECT settled_until, (SELECT count(*) FROM key_counts WHERE width = 'minute'),
		(SELECT count(*) FROM key_counts WHERE width = 'hour') FROM key_count_folds`).Row().Scan(&settled, &minutes, &hours); err != nil {
		b.t.Fatal(err)
	}
	return settled, minutes, hours
}

// The dashboard's counts come from key_counts for the settled minutes and from the keys for the
// rest, and equal a count of the keys: for every tenant and for some, over windows shorter and
// longer than what is folded, before and after keys change state long after they were created
// and new keys arrive.
func TestCountByState_FoldedCountsEqualALiveCount(t *testing.T) {
	b := setup(t)
	b.seedSpread(3000, 30*time.Hour, "old-")
	if err := keys.FoldCounts(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := b.foldState(); time.Since(settled) < 23*time.Hour {
		t.Fatalf("one fold settled until %s; want the oldest hour of the last 25 only (bounded work)", settled)
	}
	b.checkCounts("partly folded")
	b.foldAll()
	b.checkCounts("caught up")
	settled, minutes, hours := b.foldState()
	if time.Since(settled) > 7*time.Minute || minutes == 0 || hours < 20 {
		t.Fatalf("the folds settled until %s with %d minute rows and %d hour rows; want the last 25 hours folded", settled, minutes, hours)
	}
	// Late changes: keys of every age change state (a retry, an operator's action); new keys.
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET state = 'failed_final', updated_at = now()
		WHERE key LIKE 'old-%' AND substr(key, 5)::int % 13 = 0`)
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET state = 'processing', updated_at = now()
		WHERE state = 'failed_retryable' AND substr(key, 5)::int % 2 = 0`)
	b.seedSpread(200, 3*time.Minute, "new-")
	b.checkCounts("after late changes")
}

// A change committed after a fold, by a transaction that began before it, is stamped before the
// fold: the next fold still counts its minute again (it reads changes from the start of the
// oldest transaction it saw running, not from its own time).
func TestFoldCounts_ChangeCommittedAfterAFoldIsCounted(t *testing.T) {
	b := setup(t)
	b.seedSpread(500, 3*time.Hour, "k-")
	b.foldAll()
	b.checkCounts("first fold")

	sqlDB, err := b.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET state = 'failed_final', updated_at = now()
		WHERE key IN ('k-100', 'k-200', 'k-300') AND state <> 'failed_final'`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatal("no key changed")
	}
	// The fold runs while the change is not committed yet, its stamp already in the past.
	if err := keys.FoldCounts(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b.checkCounts("after the late commit")
}

// An operator of some tenants reads the counts through the console's handle (row-level
// security): the fold still counts every tenant (it runs as the tables' owner), the operator sees
// their tenants' rows of key_counts only, never every tenant's sum.
func TestCountByState_ScopedOperatorReadsTheirTenantsRows(t *testing.T) {
	b := setup(t)
	b.seedSpread(900, 26*time.Hour, "k-")
	tdb := pgtest.Tenant(t, b.db)
	one := keys.Scope{Tenants: []string{"tenant-1"}}
	sctx := tenantdb.WithTenants(context.Background(), one.Tenants)
	got, err := keys.CountByState(sctx, tdb, one, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.liveByState(one, 24*time.Hour); !slices.Equal(got, want) {
		t.Errorf("tenant-1 through the tenant handle: %v, live %v", got, want)
	}
	if _, minutes, hours := b.foldState(); minutes == 0 || hours == 0 {
		t.Errorf("the scoped read did not fold every tenant: %d minute rows, %d hour rows", minutes, hours)
	}
	var tenants []string
	if err := tdb.WithContext(sctx).Raw(`SELECT DISTINCT tenant FROM key_counts ORDER BY 1`).Scan(&tenants).Error; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tenants) != "[tenant-1]" {
		t.Errorf("tenant-1's operator sees key_counts rows of %v", tenants)
	}
}

// Keys deleted while younger than a day (a tenant moved away) stay in the folded minutes until
// RefoldCounts; then the counts are the keys' again.
func TestRefoldCounts_DeletedKeysLeaveTheCounts(t *testing.T) {
	b := setup(t)
	b.seedSpread(600, 20*time.Hour, "k-")
	b.foldAll()
	b.checkCounts("first fold")
	pgtest.Exec(t, b.db, `DELETE FROM idempotency_keys WHERE tenant = 'tenant-1'`)
	one := keys.Scope{Tenants: []string{"tenant-1"}}
	stale, err := keys.CountByState(ctx, b.db, one, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) == 0 {
		t.Fatal("the folded minutes lost the deleted keys without a refold: the fold sees deletions after all?")
	}
	if err := keys.RefoldCounts(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	b.checkCounts("after the refold")
}

// A capped count is exact up to its cap and stops reading one row past it: the plan of the
// statement, run, shows no node below the count that returned more than cap+1 rows.
func TestCountCapped_ExactBelowTheCapReadsAtMostCapPlusOne(t *testing.T) {
	b := setup(t)
	const keysInState = 12
	for i := range keysInState {
		b.seedKey("acme", fmt.Sprintf("retry-%d", i), claim.StateFailedRetryable, false, i%2 == 0)
	}
	b.seedKey("acme", "done", claim.StateCompleted, false, false)
	acme := keys.Scope{Tenants: []string{"acme"}}
	retryable := keys.InState(claim.StateFailedRetryable)
	for _, c := range []struct {
		b      keys.Backlog
		upTo   int
		n      int64
		capped bool
	}{
		{retryable, 0, keysInState, false},
		{retryable, keysInState, keysInState, false},
		{retryable, keysInState - 1, keysInState - 1, true},
		{retryable, 5, 5, true},
		{keys.NeedsAttention, 6, 6, false},
		{keys.NeedsAttention, 5, 5, true},
		{keys.Unresolved, 100, keysInState, false},
	} {
		n, capped, err := keys.CountCapped(ctx, b.db, acme, c.b, c.upTo)
		if err != nil || n != c.n || capped != c.capped {
			t.Errorf("%v up to %d: %d capped %v (%v), want %d capped %v", c.b, c.upTo, n, capped, err, c.n, c.capped)
		}
	}
	if _, _, err := keys.CountCapped(ctx, b.db, acme, keys.InState("nope"), 5); err == nil {
		t.Error("a count in no state: no error")
	}

	const upTo = 5
	cond, args, _ := acme.SQL()
	q, qargs := keys.CappedCountSQL(cond, args, retryable, upTo)
	var plan string
	if err := b.db.Raw(`EXPLAIN (ANALYZE, FORMAT JSON) `+q, qargs...).Row().Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var nodes []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var walk func(n planNode, depth int)
	read := 0.0
	walk = func(n planNode, depth int) {
		if depth > 0 { // the count's own node returns one row
			read = max(read, n.ActualRows)
			if n.ActualRows > upTo+1 {
				t.Errorf("%s returned %v rows, more than cap+1 = %d\n%s", n.NodeType, n.ActualRows, upTo+1, plan)
			}
		}
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(nodes[0].Plan, 0)
	if read != upTo+1 {
		t.Errorf("the count read %v rows at most, want cap+1 = %d (the plan has no scan?)\n%s", read, upTo+1, plan)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	ActualRows float64    `json:"Actual Rows"`
	Plans      []planNode `json:"Plans"`
}
