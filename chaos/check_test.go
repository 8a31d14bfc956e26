package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/chaos/report"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The invariant checker fails on planted violations and names the key digest: a key the client
// saw answered 2xx with no charge at paysim (and no key in the store), a charge at paysim with
// no key, a reused key answered 2xx, a fulfillment with no payment behind it. An untouched key
// breaks nothing. (The full run is CI's `make chaos`; this keeps the checker itself honest.)
func TestInvariants_PlantedViolationsFailNamingTheKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("chaos-check-test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(paysim.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	hs := httptest.NewServer(sim)
	defer hs.Close()
	client := paysim.NewClient(hs.URL, &http.Client{Timeout: 5 * time.Second})

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

	w := &world{db: db, store: store, sim: client, traffic: tr, start: time.Now()}
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
