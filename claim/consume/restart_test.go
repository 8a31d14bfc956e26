package consume_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/mqlocal"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestConsume_BrokerRestartMidStreamLosesAndDoublesNothing runs the whole path — outbox rows
// relayed with publisher confirms, consumed with dedup — on a broker of its own, restarted
// while messages are in flight: every event has exactly one effect.
func TestConsume_BrokerRestartMidStreamLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	began := time.Now()
	broker, err := mqlocal.Start(ctx, mqlocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop)
	t.Logf("private broker up in %s", broker.StartupTime)

	db := pgtest.New(t)
	pgtest.Exec(t, db, `CREATE TABLE effects (order_id text NOT NULL, amount_minor bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`)
	b := &bundle{t: t, db: db, url: broker.URL(), topo: &consume.Topology{Exchange: "events", Queue: "fulfillment", RoutingKey: "#"}}
	const n = 400
	for i := range n {
		body, _ := json.Marshal(event{Tenant: "acme", OrderID: fmt.Sprintf("ord-%d", i), Amount: int64(i)})
		if err := claim.Enqueue(ctx, db, claim.OutboxMessage{Operation: "order.paid", DownstreamKey: fmt.Sprintf("evt-%d", i), Payload: body}); err != nil {
			t.Fatal(err)
		}
	}
	sender := &daemon.AMQPSender{URL: broker.URL(), Exchange: b.topo.Exchange, RoutingKey: "order.paid", Setup: b.topo.Declare}
	t.Cleanup(func() { _ = sender.Close() })
	relay, err := daemon.NewOutboxRelay(db, daemon.SenderMap{"order.paid": sender}, daemon.OutboxConfig{BatchSize: 10, Workers: 2,
		MaxAttempts: 100, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the daemon's schedule, compressed
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = relay.RunOnce(rctx, nil, daemon.NopProgress{})
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { stopRelay(); wg.Wait() })
	cfg := b.config()
	cfg.Topology = b.topo
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := consume.New(db, cfg, func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
		time.Sleep(2 * time.Millisecond) // handling takes a while, so messages are in flight when the broker goes
		return writeEffect(ctx, tx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c, broker.URL())

	pgtest.Await(t, b.db, 30*time.Second, "a quarter of the effects", func() bool { return b.count(`SELECT count(*) FROM effects`) >= n/4 },
		"effects")
	t.Logf("%s: a quarter consumed; restarting", time.Since(began))
	if err := broker.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker restarted in %s", broker.StartupTime)
	pgtest.Await(t, b.db, 60*time.Second, "every outbox row sent and every event consumed", func() bool {
		return b.count(`SELECT count(*) FROM outbox WHERE state <> 'sent'`) == 0 && b.count(`SELECT count(*) FROM effects`) >= n
	}, "outbox", "effects")
	t.Logf("%s: all consumed", time.Since(began))
	// Nothing signals that no more deliveries will come: a doubled effect would land within this.
	time.Sleep(300 * time.Millisecond)
	if got := b.count(`SELECT count(*) FROM effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
	if got := b.count(`SELECT count(DISTINCT order_id) FROM effects`); got != n {
		t.Fatalf("distinct orders with an effect = %d, want %d", got, n)
	}
	if got := b.count(`SELECT coalesce(sum(amount_minor), 0) FROM effects`); got != n*(n-1)/2 {
		t.Fatalf("sum of effects = %d, want %d", got, n*(n-1)/2)
	}
	t.Logf("stats after the restart: %+v", c.Stats())
}
