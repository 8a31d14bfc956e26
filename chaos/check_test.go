package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/chaos/report"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// checkStore is a claim store on db with the checker tests' digest secret (one for every cell).
func checkStore(t *testing.T, db *gorm.DB) *claim.Store {
	t.Helper()
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("chaos-check-test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// checkPaysim is a client of a paysim of the test's own, closed with it.
func checkPaysim(t *testing.T) *paysim.Client {
	t.Helper()
	sim, err := paysim.NewServer(paysim.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(sim)
	t.Cleanup(func() { hs.Close(); sim.Close() })
	return paysim.NewClient(hs.URL, &http.Client{Timeout: 5 * time.Second})
}

// The invariant checker fails on planted violations and names the key digest: a key the client
// saw answered 2xx with no charge at paysim (and no key in the store), a charge at paysim with
// no key, a reused key answered 2xx, a fulfillment with no payment behind it. An untouched key
// breaks nothing. (The full run is CI's `make chaos`; this keeps the checker itself honest.)
func TestInvariants_PlantedViolationsFailNamingTheKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	store, client := checkStore(t, db), checkPaysim(t)

	tr := &traffic{}
	rec := func(key string) *keyRecord {
		r := &keyRecord{Tenant: "acme", Key: key, Body: []byte(`{}`), Scenario: "single"}
		tr.keys = append(tr.keys, r)
		return r
	}
	lost := rec("answered-but-never-charged")
	lost.Saw2xx, lost.PaymentID, lost.LastStatus = true, "pay_x", 201
	orphan := rec("charged-without-a-key")
	if _, err := client.CreateCharge(ctx, claim.DownstreamKey("acme", demo.OperationCharge, orphan.Key),
		paysim.ChargeRequest{AmountMinor: 100, Currency: "CNY", Payee: "alice"}, ""); err != nil {
		t.Fatal(err)
	}
	reused := rec("reused-with-another-amount")
	reused.Mismatch2xx = true
	rec("untouched")
	pgtest.Exec(t, db, `INSERT INTO fulfillments (payment_id, tenant, amount_minor, currency) VALUES ('pay_ghost', 'acme', 1, 'CNY')`)

	w := &world{db: db, store: store, sim: client, traffic: tr, start: time.Now(), pgs: []*cell{{db: db}}}
	got := map[string]report.Invariant{}
	for _, inv := range w.invariants(ctx, nil) {
		got[inv.Name] = inv
	}
	digest := func(r *keyRecord) string { return store.Digest(r.Tenant, demo.OperationCharge, r.Key) }
	for _, want := range []struct {
		inv, digest string
	}{
		{InvOneCharge, digest(lost)},
		{InvNoLostKey, digest(lost)},
		{InvNoOrphanCharge, digest(orphan)},
		{InvMismatch, digest(reused)},
		{InvConsumerOnce, "name no payment"},
		{InvAudit, "checkpoint"},
	} {
		inv := got[want.inv]
		if inv.OK || len(inv.Violations) != 1 || !strings.Contains(inv.Violations[0], want.digest) {
			t.Errorf("%s: ok=%v %q, want one violation naming %s", want.inv, inv.OK, inv.Violations, want.digest)
		}
	}
	for _, name := range []string{InvOrders, InvFindings, InvNothingInFlight} {
		if !got[name].OK {
			t.Errorf("%s broken: %q", name, got[name].Violations)
		}
	}
	if got[InvNoOrphanCharge].Checked != 4 || got[InvOneCharge].Checked != 1 {
		t.Errorf("checked %d keys for orphans and %d 2xx keys, want 4 and 1", got[InvNoOrphanCharge].Checked, got[InvOneCharge].Checked)
	}
}

// With cells every invariant is checked once in each cell, named by it: a key of cell b's tenant
// found in cell a is lost to cell b (named with the cell it is in), a key whose adjustment was
// applied once in each cell is a double, an effect is stray only when no cell holds its payment,
// and a row in cell b's audit_log is one too many (the chain is the control cell's) — each
// violation in its own cell's row, the other cell's row clean.
func TestInvariants_PerCellNameTheCellAndCountExecutionsInEveryCell(t *testing.T) {
	ctx := context.Background()
	dbA, dbB := pgtest.New(t), pgtest.New(t)
	storeA, storeB, client := checkStore(t, dbA), checkStore(t, dbB), checkPaysim(t)
	claimIn := func(s *claim.Store, tenant, op, key string) int64 {
		t.Helper()
		out, err := s.Claim(ctx, claim.Request{Tenant: tenant, Operation: op, Key: key, Intent: []byte(`{"amount_minor":1}`), Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return out.KeyID
	}

	tr := &traffic{}
	strayed := &keyRecord{Tenant: "globex", Key: "claimed-in-the-wrong-cell", Body: []byte(`{}`), Scenario: "single", Saw2xx: true, LastStatus: 201}
	tr.keys = append(tr.keys, strayed, &keyRecord{Tenant: "acme", Key: "untouched", Body: []byte(`{}`), Scenario: "single"})
	claimIn(storeA, "globex", demo.OperationCharge, strayed.Key)
	twice := &keyRecord{Tenant: "acme", Key: "adjusted-in-both-cells", Saw2xx: true}
	tr.adjusts = append(tr.adjusts, twice)
	for _, c := range []struct {
		db    *gorm.DB
		store *claim.Store
	}{{dbA, storeA}, {dbB, storeB}} {
		id := claimIn(c.store, "acme", demo.OperationAdjust, twice.Key)
		pgtest.Exec(t, c.db, `INSERT INTO demo_balance_adjustments (tenant, key_id, amount_minor, currency, reason) VALUES ('acme', ?, 5, 'CNY', 'test')`, id)
	}
	// Cell a's fulfillment names a payment cell b holds: no stray; cell b's names none anywhere.
	pgtest.Exec(t, dbB, `INSERT INTO payments (id, tenant, merchant_order_no, amount_minor, currency, payee, status) VALUES ('pay_in_b', 'acme', 'o-1', 1, 'CNY', 'x', 'succeeded')`)
	pgtest.Exec(t, dbA, `INSERT INTO fulfillments (payment_id, tenant, amount_minor, currency) VALUES ('pay_in_b', 'acme', 1, 'CNY')`)
	pgtest.Exec(t, dbB, `INSERT INTO fulfillments (payment_id, tenant, amount_minor, currency) VALUES ('pay_ghost', 'globex', 1, 'CNY')`)
	// An action audited in cell b: the chain is the control cell's alone.
	if err := audit.New(dbB, []byte("chaos-check-test-secret")).Append(ctx, dbB, audit.Entry{Actor: "test", Action: "key.release", Target: "x"}); err != nil {
		t.Fatal(err)
	}

	w := &world{db: dbA, store: storeA, sim: client, traffic: tr, start: time.Now(),
		pgs: []*cell{{name: "a", tenants: []string{"acme"}, db: dbA}, {name: "b", tenants: []string{"globex"}, db: dbB}}}
	invs := w.invariants(ctx, nil)
	got := map[string]report.Invariant{}
	for i, inv := range invs {
		want := "a"
		if i >= len(invs)/2 {
			want = "b"
		}
		if inv.Cell != want {
			t.Errorf("invariant %d (%s) in cell %q, want %s", i, inv.Name, inv.Cell, want)
		}
		got[inv.Cell+"|"+inv.Name] = inv
	}
	if len(invs) != 24 {
		t.Errorf("%d invariants, want 12 in each of 2 cells", len(invs))
	}
	for _, want := range []struct{ inv, says string }{
		{"b|" + InvNoLostKey, "key in cell a, not in its tenant's cell b"},
		{"a|" + InvAdjustments, "2 adjustment rows for one key"},
		{"b|" + InvConsumerOnce, "1 fulfillment or shipping rows name no payment"},
		{"b|" + InvAudit, "1 rows in cell b's audit_log: the audit chain is the control cell's alone"},
		{"a|" + InvAudit, "no checkpoint"},
	} {
		inv := got[want.inv]
		if inv.OK || len(inv.Violations) != 1 || !strings.Contains(inv.Violations[0], want.says) {
			t.Errorf("%s: ok=%v %q, want one violation saying %q", want.inv, inv.OK, inv.Violations, want.says)
		}
	}
	for _, name := range []string{"a|" + InvNoLostKey, "a|" + InvConsumerOnce, "b|" + InvAdjustments, "a|" + InvMismatch, "b|" + InvFindings} {
		if !got[name].OK {
			t.Errorf("%s broken: %q", name, got[name].Violations)
		}
	}
	if got["a|"+InvNoOrphanCharge].Checked != 1 || got["b|"+InvNoOrphanCharge].Checked != 1 || got["b|"+InvAdjustments].Checked != 0 {
		t.Errorf("cell a checked %d keys, cell b %d, cell b %d adjustments: each cell checks its own tenants' keys",
			got["a|"+InvNoOrphanCharge].Checked, got["b|"+InvNoOrphanCharge].Checked, got["b|"+InvAdjustments].Checked)
	}
}

func TestPathsWalked_APathWalkedZeroTimesFailsTheRun(t *testing.T) {
	all := map[string]int{}
	for i, name := range Paths {
		all[name] = i + 1
	}
	if inv := pathsWalked(all); !inv.OK || inv.Checked != len(Paths) {
		t.Fatalf("every path walked: %+v", inv)
	}
	all[PathOutbox] = 0
	delete(all, PathPurgedRetried)
	inv := pathsWalked(all)
	if inv.OK || len(inv.Violations) != 2 || !strings.Contains(inv.Violations[0]+inv.Violations[1], PathOutbox) {
		t.Fatalf("two paths not walked: %+v", inv)
	}
}

// With cells, a cell none of whose tenants' keys was answered 2xx walked nothing: it fails the
// paths-walked invariant naming the cell, while a cell that answered one key passes.
func TestCellsWalked_ACellThatServedNothingFailsTheRun(t *testing.T) {
	walked := pathsWalked(map[string]int{})
	base := walked.Checked
	invs := []report.Invariant{
		{Name: InvNoLostKey, Cell: "a", OK: true, Checked: 12},
		{Name: InvOneCharge, Cell: "b", OK: true, Checked: 0},
		{Name: InvNoLostKey, Cell: "b", OK: true, Checked: 0},
	}
	got := cellsWalked(report.Invariant{Name: InvPathsWalked, OK: true}, invs)
	if got.OK || len(got.Violations) != 1 || !strings.Contains(got.Violations[0], "cell b: no key of its tenants answered 2xx") || got.Checked != 2 {
		t.Fatalf("cell b served nothing: %+v", got)
	}
	invs[2].Checked = 1
	if got := cellsWalked(report.Invariant{Name: InvPathsWalked, OK: true}, invs); !got.OK {
		t.Fatalf("both cells served: %+v", got)
	}
	// Without cells (Cell ""), nothing is added.
	if got := cellsWalked(walked, []report.Invariant{{Name: InvNoLostKey, Checked: 0}}); got.Checked != base || len(got.Violations) != len(walked.Violations) {
		t.Fatalf("without cells: %+v, want %+v", got, walked)
	}
}
