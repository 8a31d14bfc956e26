package consume_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// cellsOf readies a second database (cell b) beside b's (cell a) with the effects table, and
// returns Stores routing acme to a and globex to b; any other tenant has no store.
func (b *bundle) cellsOf() (dbs map[string]*gorm.DB, stores func(string) (*claim.Store, error)) {
	b.t.Helper()
	dbs = map[string]*gorm.DB{"a": b.db, "b": pgtest.New(b.t)}
	pgtest.Exec(b.t, dbs["b"], `CREATE TABLE effects (order_id text NOT NULL, amount_minor bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`)
	byCell := map[string]*claim.Store{}
	for name, db := range dbs {
		s, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("consume-test-secret-01")})
		if err != nil {
			b.t.Fatal(err)
		}
		byCell[name] = s
	}
	cellOf := map[string]string{"acme": "a", "globex": "b"}
	return dbs, func(tenant string) (*claim.Store, error) {
		if c, ok := cellOf[tenant]; ok {
			return byCell[c], nil
		}
		return nil, errors.New("no cell")
	}
}

// TestConsume_RoutedByTenantEachMessageCommitsInItsTenantsCell: with Stores, a message's dedup row
// and business write commit in its tenant's cell only — batches of messages of both cells
// included — and a message of a tenant with no cell is handed back, written nowhere.
func TestConsume_RoutedByTenantEachMessageCommitsInItsTenantsCell(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dbs, stores := b.cellsOf()
	cfg := b.config()
	cfg.Stores = stores
	c, err := consume.New(b.db, cfg, writeEffect)
	if err != nil {
		t.Fatal(err)
	}
	var events []event
	for i := range 8 { // published before the consumer starts: they arrive in mixed batches
		events = append(events, event{Tenant: []string{"acme", "globex"}[i%2], OrderID: fmt.Sprintf("ord-%d", i), Amount: int64(i + 1)})
	}
	events = append(events, event{Tenant: "hooli", OrderID: "ord-hooli", Amount: 1})
	b.publish(events)
	serve(t, c, b.url)
	waitStats(t, c, "both cells' messages processed and hooli's handed back", func(s consume.Stats) bool { return s.Processed == 8 && s.Retried >= 1 })
	checkCells(t, dbs, `SELECT count(*) FROM effects WHERE order_id = ?`)
	checkCells(t, dbs, `SELECT count(*) FROM consumed_messages WHERE business_key = ?`)
}

// TestSpanning_RoutedByTenantEachKeyIsClaimedInItsTenantsCell: a spanning consumer with Stores
// claims each message's key, and writes its effect, in the tenant's cell only.
func TestSpanning_RoutedByTenantEachKeyIsClaimedInItsTenantsCell(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, ship := b.spanning()
	dbs, stores := b.cellsOf()
	cfg := b.config()
	cfg.Consumer, cfg.Stores = "shipper", stores
	c, err := consume.NewSpanning(store, cfg, ship.recorded())
	if err != nil {
		t.Fatal(err)
	}
	var events []event
	for i := range 8 {
		events = append(events, event{Tenant: []string{"acme", "globex"}[i%2], OrderID: fmt.Sprintf("ord-%d", i), Amount: int64(i + 1)})
	}
	events = append(events, event{Tenant: "hooli", OrderID: "ord-hooli", Amount: 1})
	b.publish(events)
	serve(t, c, b.url)
	waitStats(t, c, "both cells' messages processed and hooli's handed back", func(s consume.Stats) bool { return s.Processed == 8 && s.Retried >= 1 })
	checkCells(t, dbs, `SELECT count(*) FROM effects WHERE order_id = ?`)
	checkCells(t, dbs, `SELECT count(*) FROM idempotency_keys WHERE key = ? AND state = 'completed'`)
}

// checkCells: order i of the test's events is counted once in its tenant's cell (acme's even
// orders in a, globex's odd ones in b) and not in the other; hooli's order in neither.
func checkCells(t *testing.T, dbs map[string]*gorm.DB, q string) {
	t.Helper()
	count := func(db *gorm.DB, order string) (n int64) {
		if err := db.Raw(q, order).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 8 {
		order, home := fmt.Sprintf("ord-%d", i), []string{"a", "b"}[i%2]
		for name, db := range dbs {
			want := int64(0)
			if name == home {
				want = 1
			}
			if got := count(db, order); got != want {
				t.Errorf("%s: cell %s has %d of %s, want %d", q, name, got, order, want)
			}
		}
	}
	for name, db := range dbs {
		if got := count(db, "ord-hooli"); got != 0 {
			t.Errorf("%s: cell %s has %d of a tenant with no cell", q, name, got)
		}
	}
}
