package keys_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// seedKeys inserts keys straight into the table (test set-up): tenant, key, state; processing
// keys get an expired lease when expired is set.
func (b *bundle) seedKey(tenant, key string, st claim.State, expired, attention bool) {
	b.t.Helper()
	lease := "NULL"
	if st == claim.StateProcessing {
		lease = "now() + interval '1 minute'"
		if expired {
			lease = "now() - interval '1 minute'"
		}
	}
	pgtest.Exec(b.t, b.db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
		request, state, downstream_key, lease_expires_at, needs_attention)
		VALUES (?, 'payment.charge', ?, md5(? || ?) || md5(?), md5(?), 1, '{"amount": 1, "customer": {"id": "c1"}}', ?, md5(? || ?), `+lease+`, ?)`,
		tenant, key, tenant, key, key, key, string(st), tenant, key, attention)
}

// Search and find read only the tenants of the scope: a filter naming another tenant, or a scope
// of no tenant, reads nothing; keyset pages visit each key once.
func TestSearchKeys_ScopeKeepsOtherTenantsOut(t *testing.T) {
	b := setup(t)
	for i := range 5 {
		b.seedKey("acme", fmt.Sprintf("k-%d", i), claim.StateCompleted, false, false)
	}
	b.seedKey("globex", "k-0", claim.StateCompleted, false, false)
	acme := keys.Scope{Tenants: []string{"acme"}}

	seen := map[int64]bool{}
	f := keys.KeyFilter{Limit: 2}
	for range 10 {
		rows, next, err := keys.SearchKeys(ctx, b.db, acme, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Tenant != "acme" || seen[r.ID] {
				t.Fatalf("page row %+v: another tenant's or seen twice", r)
			}
			seen[r.ID] = true
		}
		if next == nil {
			break
		}
		if f.After, _ = keys.ParseCursor(next.String()); f.After == nil {
			t.Fatalf("cursor %q does not parse back", next.String())
		}
	}
	if len(seen) != 5 {
		t.Errorf("acme's pages saw %d keys, want 5", len(seen))
	}
	for name, tc := range map[string]struct {
		scope keys.Scope
		f     keys.KeyFilter
		want  int
	}{
		"all tenants":                {keys.AllTenants(), keys.KeyFilter{}, 6},
		"another tenant's filter":    {acme, keys.KeyFilter{Tenant: "globex"}, 0},
		"no tenant":                  {keys.Scope{}, keys.KeyFilter{}, 0},
		"request field in scope":     {acme, keys.KeyFilter{Field: "customer.id", Value: "c1"}, 5},
		"state outside every key":    {keys.AllTenants(), keys.KeyFilter{State: claim.StateFailedFinal}, 0},
		"tenant filter in all scope": {keys.AllTenants(), keys.KeyFilter{Tenant: "globex"}, 1},
	} {
		rows, _, err := keys.SearchKeys(ctx, b.db, tc.scope, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != tc.want {
			t.Errorf("%s: %d keys, want %d", name, len(rows), tc.want)
		}
	}
	for name, tc := range map[string]struct {
		scope keys.Scope
		want  int
	}{"acme": {acme, 1}, "all": {keys.AllTenants(), 2}, "none": {keys.Scope{}, 0}} {
		rows, err := keys.FindKeys(ctx, b.db, tc.scope, "k-0")
		if err != nil || len(rows) != tc.want {
			t.Errorf("find k-0 in %s: %d keys (%v), want %d", name, len(rows), err, tc.want)
		}
	}
	if _, err := keys.FindKeys(ctx, b.db, acme, ""); err == nil {
		t.Error("find of an empty key: no error")
	}
	if _, ok := keys.ParseCursor("12_x"); ok {
		t.Error("ParseCursor accepted 12_x")
	}
}

// The dashboard's and the daemon's counts come from one set of functions: per state in a window,
// in a state, needing attention, expired leases (capped when asked) — each within the scope.
func TestCounts_StatesAttentionAndExpiredLeasesInScope(t *testing.T) {
	b := setup(t)
	b.seedKey("acme", "done", claim.StateCompleted, false, false)
	b.seedKey("acme", "live", claim.StateProcessing, false, false)
	b.seedKey("acme", "stale-1", claim.StateProcessing, true, true)
	b.seedKey("acme", "stale-2", claim.StateProcessing, true, false)
	b.seedKey("globex", "stale", claim.StateProcessing, true, true)
	b.seedKey("globex", "retry", claim.StateFailedRetryable, false, false)
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'done'`)
	acme, all := keys.Scope{Tenants: []string{"acme"}}, keys.AllTenants()

	check := func(name string, got int64, err error, want int64) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s: %d (%v), want %d", name, got, err, want)
		}
	}
	n, err := keys.CountExpiredLeases(ctx, b.db, acme, 0)
	check("acme expired leases", n, err, 2)
	n, err = keys.CountExpiredLeases(ctx, b.db, all, 0)
	check("all expired leases", n, err, 3)
	n, err = keys.CountExpiredLeases(ctx, b.db, all, 2)
	check("all expired leases capped at 2", n, err, 2)
	n, err = keys.CountExpiredLeases(ctx, b.db, keys.Scope{}, 0)
	check("no tenant's expired leases", n, err, 0)
	n, err = keys.CountNeedsAttention(ctx, b.db, acme)
	check("acme attention", n, err, 1)
	n, err = keys.CountNeedsAttention(ctx, b.db, all)
	check("all attention", n, err, 2)
	n, err = keys.CountInState(ctx, b.db, acme, claim.StateProcessing)
	check("acme processing", n, err, 3)
	n, err = keys.CountInState(ctx, b.db, all, claim.StateFailedRetryable)
	check("all failed_retryable", n, err, 1)

	// The window leaves the two-day-old completed key out.
	rows, err := keys.CountByState(ctx, b.db, acme, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].State != claim.StateProcessing || rows[0].N != 3 {
		t.Errorf("acme by state in 24 h: %+v, want processing 3", rows)
	}
	mins, err := keys.ClaimsPerMinute(ctx, b.db, all)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, m := range mins {
		total += m.N
	}
	if total != 5 {
		t.Errorf("claims in the last hour: %d, want 5 (the two-day-old key left out)", total)
	}
}

// NamesOf names the keys that exist among ids, and only those.
func TestNamesOf_NamesTheKeysThatExist(t *testing.T) {
	b := setup(t)
	b.seedKey("acme", "order-1", claim.StateCompleted, false, false)
	var id int64
	if err := b.db.Raw(`SELECT id FROM idempotency_keys WHERE key = 'order-1'`).Scan(&id).Error; err != nil {
		t.Fatal(err)
	}
	got, err := keys.NamesOf(ctx, b.db, []int64{id, id + 1000})
	if err != nil || len(got) != 1 || got[0] != (keys.KeyName{ID: id, Tenant: "acme", Operation: "payment.charge", Key: "order-1"}) {
		t.Errorf("NamesOf = %+v, %v; want only order-1 named", got, err)
	}
	if got, err := keys.NamesOf(ctx, b.db, nil); err != nil || got != nil {
		t.Errorf("NamesOf(nil) = %v, %v", got, err)
	}
}

// An operator of several tenants pages through their keys in one order, newest first, each key
// once, with or without a filter: the page of each tenant, merged, is the page of all of them.
func TestSearchKeys_SeveralTenantsPageInOneOrder(t *testing.T) {
	b := setup(t)
	for i := range 40 {
		st := claim.StateCompleted
		if i%3 == 0 {
			st = claim.StateFailedFinal
		}
		b.seedKey(fmt.Sprintf("t%d", i%4), fmt.Sprintf("k-%02d", i), st, false, false)
	}
	// Interleaved creation times across the tenants, two keys sharing one (the id breaks the tie).
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET created_at = now() - (40 - substr(key, 3)::int) * interval '1 minute'`)
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET created_at = (SELECT created_at FROM idempotency_keys WHERE key = 'k-10') WHERE key = 'k-11'`)
	scope := keys.Scope{Tenants: []string{"t0", "t1", "t3"}}
	for _, f := range []keys.KeyFilter{{Limit: 4}, {Limit: 3, State: claim.StateFailedFinal}} {
		var want []int64
		q := `SELECT id FROM idempotency_keys WHERE tenant IN ('t0', 't1', 't3')`
		if f.State != "" {
			q += ` AND state = '` + string(f.State) + `'`
		}
		if err := b.db.Raw(q + ` ORDER BY created_at DESC, id DESC`).Scan(&want).Error; err != nil {
			t.Fatal(err)
		}
		var got []int64
		for range 50 {
			rows, next, err := keys.SearchKeys(ctx, b.db, scope, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				got = append(got, r.ID)
			}
			if next == nil {
				break
			}
			f.After = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("filter %+v: pages gave %v, want %v", f, got, want)
		}
	}
}
