package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/internal/testinfra/mqtest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// event is the test's domain event: an order paid, identified by its order id.
type event struct {
	Tenant  string `json:"tenant"`
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount_minor"`
}

func byOrderID(m consume.Message) (string, string, error) {
	var e event
	if err := json.Unmarshal(m.Body, &e); err != nil {
		return "", "", err
	}
	if e.OrderID == "" {
		return "", "", errors.New("order_id is missing")
	}
	return e.Tenant, e.OrderID, nil
}

// bundle is one test's database, broker names and a business table without a unique
// constraint of its own: a doubled effect shows as a second row.
type bundle struct {
	t    testing.TB
	db   *gorm.DB
	url  string
	topo *consume.Topology
}

func setup(t testing.TB) *bundle {
	t.Helper()
	url := mqtest.URL(t)
	db := pgtest.New(t)
	pgtest.Exec(t, db, `CREATE TABLE effects (order_id text NOT NULL, amount_minor bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`)
	p := mqtest.Prefix(t)
	b := &bundle{t: t, db: db, url: url, topo: &consume.Topology{Exchange: p + "events", Queue: p + "fulfillment", RoutingKey: "#"}}
	conn := mqtest.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the queues are durable: leave the shared broker clean
		if ch, err := amqp.Dial(url); err == nil {
			if c, err := ch.Channel(); err == nil {
				_, _ = c.QueueDelete(b.topo.Queue, false, false, false)
				_ = c.ExchangeDelete(b.topo.Exchange, false, false)
			}
			ch.Close()
		}
	})
	return b
}

// writeEffect is the business write: one row per effect.
func writeEffect(ctx context.Context, tx *gorm.DB, m consume.Message) error {
	var e event
	if err := json.Unmarshal(m.Body, &e); err != nil {
		return err
	}
	return tx.WithContext(ctx).Exec(`INSERT INTO effects (order_id, amount_minor) VALUES (?, ?)`, e.OrderID, e.Amount).Error
}

func (b *bundle) config() consume.Config {
	return consume.Config{Consumer: "fulfillment", Queue: b.topo.Queue, BusinessKey: byOrderID,
		Prefetch: 64, Workers: 4, RetryDelay: 20 * time.Millisecond, Reconnect: 100 * time.Millisecond}
}

// publish sends events with publisher confirms, each under its own message id.
func (b *bundle) publish(events []event) {
	b.t.Helper()
	conn, err := amqp.Dial(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.t.Fatal(err)
	}
	ctx := context.Background()
	var dcs []*amqp.DeferredConfirmation
	for i, e := range events {
		body, _ := json.Marshal(e)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, b.topo.Exchange, "order.paid", false, false,
			amqp.Publishing{MessageId: fmt.Sprintf("msg-%d", i), DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			b.t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			b.t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// serve runs c until the test ends.
func serve(t testing.TB, c *consume.Consumer, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Serve(ctx, url) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitStats waits until cond holds of c's stats, re-checking at each change the consumer
// signals; it fails after 30 s.
func waitStats(t testing.TB, c *consume.Consumer, what string, cond func(consume.Stats) bool) {
	t.Helper()
	changed := c.StatsChanged()
	timeout := time.After(30 * time.Second)
	for !cond(c.Stats()) {
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %s (stats %+v)", what, c.Stats())
		}
	}
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		b.t.Fatal(err)
	}
	return n
}
