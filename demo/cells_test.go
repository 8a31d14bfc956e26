package demo_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/claimtest"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/mqtest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestPayments_RoutedByTenantEachPaymentLivesInItsTenantsCell: with Stores, a payment's key,
// payment row and order are written in its tenant's cell only, the tenant reads its payment
// back from there, the channel's callback finds the order in its cell and pays it, and a tenant
// with no cell is refused with nothing charged or written.
func TestPayments_RoutedByTenantEachPaymentLivesInItsTenantsCell(t *testing.T) {
	t.Parallel()
	dbs := map[string]*gorm.DB{"a": pgtest.New(t), "b": pgtest.New(t)}
	cellOf := map[string]string{"acme": "a", "globex": "b"}
	stores := claimtest.Open(t, []byte("demo-test-secret-0123"), map[string]*gorm.DB{"acme": dbs["a"], "globex": dbs["b"]})
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: dbs["a"], Store: stores["acme"], Paysim: fastCallbacks(paysim.Config{Seed: 5}),
		Tenants: []string{"acme", "globex", "hooli"},
		Stores:  stores.Of})
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

// TestWorld_RoutedByTenantEveryRowATenantOwnsLivesInItsCell: with Stores, what the demo writes
// for a tenant besides its payment — a checkout token, a like, the answer recorded for a
// replay, the fulfillment and the shipment its payment event makes (dedup rows included) — is
// in the tenant's cell and in no other; a tenant with no cell gets a token or a like nowhere.
func TestWorld_RoutedByTenantEveryRowATenantOwnsLivesInItsCell(t *testing.T) {
	t.Parallel()
	url := mqtest.URL(t)
	dbs := map[string]*gorm.DB{"a": pgtest.New(t), "b": pgtest.New(t)}
	cellOf := map[string]string{"acme": "a", "globex": "b"}
	stores := claimtest.Open(t, []byte("demo-test-secret-0123"), map[string]*gorm.DB{"acme": dbs["a"], "globex": dbs["b"]})
	p := mqtest.Prefix(t)
	topo := &consume.Topology{Exchange: p + "events", Queue: p + "fulfillment", RoutingKey: "payment.#"}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: dbs["a"], Store: stores["acme"], Paysim: paysim.Config{Seed: 7},
		Tenants: []string{"acme", "globex", "hooli"}, AMQPURL: url, Events: topo,
		Stores: stores.Of})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			w.Close()
		}
		if ch, err := mqtest.Dial(t).Channel(); err == nil {
			_, _ = ch.QueueDelete(topo.Queue, false, false, false)
			_, _ = ch.QueueDelete(topo.Queue+".shipping", false, false, false)
			_ = ch.ExchangeDelete(topo.Exchange, false, false)
		}
	})
	e := &env{t: t, w: w}
	for tenant := range cellOf {
		key := w.APIKey(tenant)
		tok := e.token(key)
		if r := e.post("/v1/checkout", body, key, httpidem.HeaderToken, tok); r.status != 201 {
			t.Fatalf("%s checks out with a token: %d %v", tenant, r.status, r.body)
		}
		if r := e.post("/v1/checkout", body, key, httpidem.HeaderToken, tok); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s reuses its token: %d %v, want the replay", tenant, r.status, r.body)
		}
		if status, _, _ := e.likeReq("POST", "/v1/articles/art-1/likes", `{"user_id":"u1"}`, key); status != 201 {
			t.Fatalf("%s likes: %d", tenant, status)
		}
	}
	hooli := w.APIKey("hooli")
	if r := e.post("/v1/checkout/tokens", "", hooli); r.status != 503 {
		t.Errorf("a tenant with no cell asks for a token: %d, want 503", r.status)
	}
	if status, _, _ := e.likeReq("POST", "/v1/articles/art-1/likes", `{"user_id":"u1"}`, hooli); status != 503 {
		t.Errorf("a tenant with no cell likes: %d, want 503", status)
	}
	// Each cell's outbox relay (its own daemon in a deployment) sends its payment event.
	for name, db := range dbs {
		relay, err := daemon.NewOutboxRelay(db, w.Senders(), daemon.OutboxConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relay.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatalf("cell %s's relay: %v", name, err)
		}
	}
	timeout := time.After(20 * time.Second)
	for f, s := w.Fulfillment.Stats(), w.Shipping.Stats(); f.Processed < 2 || s.Processed < 2; f, s = w.Fulfillment.Stats(), w.Shipping.Stats() {
		select {
		case <-w.Fulfillment.StatsChanged():
		case <-w.Shipping.StatsChanged():
		case <-timeout:
			t.Fatalf("fulfillment stats %+v, shipping stats %+v; want both tenants' events processed", f, s)
		}
	}
	w.Close() // flushes the answers recorded for the replays
	closed = true
	for _, q := range []string{
		`SELECT count(*) FROM one_time_tokens WHERE tenant = ? AND used_at IS NOT NULL`,
		`SELECT count(*) FROM demo_likes WHERE tenant = ?`,
		`SELECT count(*) FROM key_answers a JOIN idempotency_keys k ON k.id = a.key_id WHERE k.tenant = ?`,
		`SELECT count(*) FROM fulfillments WHERE tenant = ?`,
		`SELECT count(*) FROM shipping_notices WHERE tenant = ?`,
		`SELECT count(*) FROM consumed_messages WHERE tenant = ? AND consumer = 'fulfillment'`,
	} {
		for tenant, home := range cellOf {
			for name, db := range dbs {
				var n int64
				if err := db.Raw(q, tenant).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				if want := name == home; (n == 1) != want || n > 1 {
					t.Errorf("%s\n  cell %s holds %d of %s's (its cell: %s); want 1 in its cell, 0 elsewhere", q, name, n, tenant, home)
				}
			}
		}
		for name, db := range dbs {
			var n int64
			if err := db.Raw(q, "hooli").Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s\n  cell %s holds %d of a tenant with no cell", q, name, n)
			}
		}
	}
}
