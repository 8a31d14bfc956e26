package demo

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/daemon"
)

// OperationPaymentEvent is the outbox operation that publishes the payments service's domain
// event "payment succeeded" to RabbitMQ (staged in the transaction that completes the charge).
const OperationPaymentEvent = "payment.succeeded"

// PaymentEvents is where the domain events go and where fulfillment reads them; the relay's
// sender and the consumer both declare it.
var PaymentEvents = consume.Topology{Exchange: "idemops.events", Queue: "fulfillment.payments", RoutingKey: "payment.#"}

// paymentEvent is the event's body. The tenant comes from the key the payment was made under.
type paymentEvent struct {
	Tenant      string `json:"tenant"`
	PaymentID   string `json:"payment_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
}

// paymentEventKey names a payment event's tenant and business key (the payment id).
func paymentEventKey(m consume.Message) (string, string, error) {
	var e paymentEvent
	if err := json.Unmarshal(m.Body, &e); err != nil {
		return "", "", err
	}
	if e.PaymentID == "" || e.Tenant == "" {
		return "", "", errors.New("payment event without tenant or payment_id")
	}
	return e.Tenant, e.PaymentID, nil
}

// FulfillmentConsumer is the demo's second service: one fulfillment per paid payment, deduped
// by payment id (the business key) in the transaction that writes it, acknowledged after commit.
// With stores (cells) both commit in the payment's tenant's cell.
func FulfillmentConsumer(db *gorm.DB, stores func(tenant string) (*claim.Store, error), topo consume.Topology, log *slog.Logger) (*consume.Consumer, error) {
	return consume.New(db, consume.Config{Consumer: "fulfillment", Queue: topo.Queue, Topology: &topo,
		BusinessKey: paymentEventKey, Logger: log, Stores: stores},
		func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
			var e paymentEvent
			if err := json.Unmarshal(m.Body, &e); err != nil {
				return err
			}
			return tx.WithContext(ctx).Exec(`INSERT INTO fulfillments (payment_id, tenant, amount_minor, currency) VALUES (?, ?, ?, ?)`,
				e.PaymentID, e.Tenant, e.AmountMinor, e.Currency).Error
		})
}

// startEvents starts the fulfillment consumer (local work, one transaction) and the shipping
// consumer (spanning work, through claim keys) on the world's broker, and makes the AMQP sender
// that relays the payment events. Without consumers only the sender is made (and the shipping
// operation registered, for the daemon). With stores (cells) each event is consumed in its
// tenant's cell.
func (w *World) startEvents(db *gorm.DB, store *claim.Store, stores func(string) (*claim.Store, error), url string, events *consume.Topology,
	log *slog.Logger, consumers bool) error {
	if log == nil {
		log = slog.Default()
	}
	topo := PaymentEvents
	if events != nil {
		topo = *events
	}
	shipTopo := consume.Topology{Exchange: topo.Exchange, Queue: topo.Queue + ".shipping", RoutingKey: topo.RoutingKey}
	c, err := FulfillmentConsumer(db, stores, topo, log)
	if err != nil {
		return err
	}
	ship := consume.Recorded("shipping", ShipmentOperation{Client: w.Client})
	if err := w.Operations.Register(ship); err != nil { // the daemon compensates stuck shipments
		return err
	}
	s, err := consume.NewSpanning(store, consume.Config{Consumer: "shipping", Queue: shipTopo.Queue, Topology: &shipTopo,
		BusinessKey: paymentEventKey, Logger: log, Stores: stores}, ship)
	if err != nil {
		return err
	}
	w.events = &daemon.AMQPSender{URL: url, Exchange: topo.Exchange, RoutingKey: "payment.succeeded",
		Setup: func(ch *amqp.Channel) error { // both queues exist before the first event is published
			if err := topo.Declare(ch); err != nil {
				return err
			}
			return shipTopo.Declare(ch)
		}}
	if !consumers {
		w.stopEvents = func() { _ = w.events.Close() }
		return nil
	}
	w.Fulfillment, w.Shipping = c, s
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Serve(ctx, url) }()
	go func() { defer wg.Done(); _ = s.Serve(ctx, url) }()
	w.stopEvents = func() { cancel(); wg.Wait(); _ = w.events.Close() }
	return nil
}

// ApplyPaymentWithEvent is ApplyPayment plus the domain event payment.succeeded staged in the
// outbox in the same transaction, so the event exists exactly when the payment does.
func ApplyPaymentWithEvent(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	snap, err := ApplyPayment(ctx, tx, l, doc)
	if err != nil {
		return nil, err
	}
	var p struct {
		PaymentID   string `json:"payment_id"`
		AmountMinor int64  `json:"amount_minor"`
		Currency    string `json:"currency"`
	}
	if err := json.Unmarshal(snap.Body, &p); err != nil {
		return nil, err
	}
	event, _ := json.Marshal(paymentEvent{Tenant: l.Tenant, PaymentID: p.PaymentID, AmountMinor: p.AmountMinor, Currency: p.Currency})
	if err := claim.Enqueue(ctx, tx, claim.OutboxMessage{KeyID: l.KeyID, Operation: OperationPaymentEvent,
		DownstreamKey: claim.DownstreamKey(l.Tenant, OperationPaymentEvent, l.Key), Payload: event}); err != nil {
		return nil, err
	}
	return snap, nil
}
