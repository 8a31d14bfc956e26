package demo_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestPayments_RoutedByTenantEachPaymentLivesInItsTenantsCell: with Stores, a payment's key,
// payment row and order are written in its tenant's cell only, the tenant reads its payment
// back from there, the channel's callback finds the order in its cell and pays it, and a tenant
// with no cell is refused with nothing charged or written.
func TestPayments_RoutedByTenantEachPaymentLivesInItsTenantsCell(t *testing.T) {
	t.Parallel()
	dbs := map[string]*gorm.DB{"a": pgtest.New(t), "b": pgtest.New(t)}
	stores := map[string]*claim.Store{}
	for name, db := range dbs {
		s, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123")})
		if err != nil {
			t.Fatal(err)
		}
		stores[name] = s
	}
	cellOf := map[string]string{"acme": "a", "globex": "b"}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: dbs["a"], Store: stores["a"], Paysim: fastCallbacks(paysim.Config{Seed: 5}),
		Tenants: []string{"acme", "globex", "hooli"},
		Stores: func(tenant string) (*claim.Store, error) {
			if c, ok := cellOf[tenant]; ok {
				return stores[c], nil
			}
			return nil, fmt.Errorf("tenant %q has no cell", tenant)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	call := func(method, path, tenant, key, body string) (int, string) {
		req, _ := http.NewRequest(method, w.APIURL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+w.APIKey(tenant))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		return res.StatusCode, res.Header.Get("Location")
	}
	for tenant := range cellOf {
		status, location := call("POST", "/v1/payments", tenant, "pay-1", body)
		if status != 201 || location == "" {
			t.Fatalf("%s pays: %d %q", tenant, status, location)
		}
		if status, _ := call("GET", location, tenant, "", ""); status != 200 {
			t.Errorf("%s reads its payment back: %d", tenant, status)
		}
	}
	count := func(db *gorm.DB, q, tenant string) (n int64) {
		if err := db.Raw(q, tenant).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	for tenant, home := range cellOf {
		for name, db := range dbs {
			want := int64(0)
			if name == home {
				want = 1
			}
			keys := count(db, `SELECT count(*) FROM idempotency_keys WHERE tenant = ? AND state = 'completed'`, tenant)
			payments := count(db, `SELECT count(*) FROM payments WHERE tenant = ?`, tenant)
			if keys != want || payments != want {
				t.Errorf("cell %s holds %d keys, %d payments of %s; want %d", name, keys, payments, tenant, want)
			}
		}
	}
	// The channel's callbacks name orders by number only: each is found in its tenant's cell.
	timeout := time.After(20 * time.Second)
	for !w.Paysim.CallbacksSettled() {
		select {
		case <-w.Paysim.CallbacksChanged():
		case <-timeout:
			t.Fatal("callbacks still pending after 20 s")
		}
	}
	for _, cb := range w.Paysim.Callbacks() {
		if cb.Status != paysim.CallbackDelivered {
			t.Errorf("callback %s %s: %s (%s)", cb.ID, cb.Type, cb.Status, cb.LastError)
		}
	}
	for tenant, home := range cellOf {
		if n := count(dbs[home], `SELECT count(*) FROM demo_orders WHERE tenant = ? AND status = 'paid'`, tenant); n != 1 {
			t.Errorf("%s's order in cell %s: %d paid, want 1", tenant, home, n)
		}
	}
	if status, _ := call("POST", "/v1/payments", "hooli", "pay-1", body); status != http.StatusServiceUnavailable {
		t.Errorf("a tenant with no cell pays: %d, want 503", status)
	}
	if n := w.Paysim.ChargeCount(claim.DownstreamKey("hooli", "payment.charge", "pay-1")); n != 0 {
		t.Errorf("%d charges at paysim for a tenant with no cell", n)
	}
	for name, db := range dbs {
		if n := count(db, `SELECT count(*) FROM idempotency_keys WHERE tenant = ?`, "hooli"); n != 0 {
			t.Errorf("cell %s holds %d keys of a tenant with no cell", name, n)
		}
	}
}
