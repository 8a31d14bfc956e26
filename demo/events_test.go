package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/mqtest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestEvents_PaymentReachesFulfillmentOnce: a payment's domain event goes through the outbox
// and RabbitMQ to the fulfillment consumer (local work) and the shipping consumer (spanning
// work: a paysim notification, then a shipping_notices row); a retried request and a relay that
// resends the row still make one fulfillment, one shipment and one notification.
func TestEvents_PaymentReachesFulfillmentOnce(t *testing.T) {
	t.Parallel()
	url := mqtest.URL(t)
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123")})
	if err != nil {
		t.Fatal(err)
	}
	p := mqtest.Prefix(t)
	topo := &consume.Topology{Exchange: p + "events", Queue: p + "fulfillment", RoutingKey: "payment.#"}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: db, Store: store, Paysim: paysim.Config{Seed: 3},
		AMQPURL: url, Events: topo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Close()
		if ch, err := mqtest.Dial(t).Channel(); err == nil {
			_, _ = ch.QueueDelete(topo.Queue, false, false, false)
			_ = ch.ExchangeDelete(topo.Exchange, false, false)
		}
	})
	e := &env{t: t, w: w, store: store, key: w.APIKey("acme")}
	for range 2 { // the client retries: replayed, nothing new staged
		if r := e.pay("evt-1", body); r.status != 201 {
			t.Fatalf("%+v", r)
		}
	}
	relay, err := daemon.NewOutboxRelay(db, w.Senders(), daemon.OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := relay.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}
	// The relay sends the event again (as after a crash between publish and "sent").
	pgtest.Exec(t, db, `UPDATE outbox SET state = 'pending', next_attempt_at = now() WHERE operation = ?`, demo.OperationPaymentEvent)
	if _, err := relay.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for f, s := w.Fulfillment.Stats(), w.Shipping.Stats(); f.Processed+f.Duplicates < 2 || s.Processed+s.Duplicates < 2; f, s = w.Fulfillment.Stats(), w.Shipping.Stats() {
		select { // each consumer signals every change of its stats
		case <-w.Fulfillment.StatsChanged():
		case <-w.Shipping.StatsChanged():
		case <-timeout:
			t.Fatalf("fulfillment stats %+v, shipping stats %+v", f, s)
		}
	}
	var n int64
	db.Raw(`SELECT count(*) FROM fulfillments WHERE tenant = 'acme'`).Scan(&n)
	if s := w.Fulfillment.Stats(); n != 1 || s.Processed != 1 || s.Duplicates != 1 {
		t.Fatalf("fulfillments = %d, stats %+v; want 1, 1 processed, 1 duplicate", n, s)
	}
	var paymentID string
	db.Raw(`SELECT payment_id FROM shipping_notices WHERE tenant = 'acme'`).Scan(&paymentID)
	if s := w.Shipping.Stats(); paymentID == "" || s.Processed != 1 || s.Duplicates != 1 {
		t.Fatalf("shipment %q, stats %+v; want one, 1 processed, 1 duplicate", paymentID, s)
	}
	note, ok := w.Paysim.Notification(claim.DownstreamKey("acme", demo.OperationShipment, paymentID))
	if !ok || note.Deliveries != 1 {
		t.Fatalf("shipment notification at paysim: %+v %v; want one delivery", note, ok)
	}
}
