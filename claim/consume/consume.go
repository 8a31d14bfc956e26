// Package consume runs RabbitMQ consumers that are idempotent the way the second seed's scheme 6
// asks: the broker delivers at least once, so the consumer dedupes each message by its business
// key (an order id — never the message id, which a republish changes) in the same local
// transaction as its business write, and acknowledges the message only after that transaction
// committed. A rolled-back transaction leaves no dedup row and the message is handed back, so
// its redelivery is processed; a crash after the commit and before the ack makes the broker
// redeliver a message whose dedup row exists, and it is dropped as a duplicate.
//
// Work that spans services cannot share one transaction with the remote call. NewSpanning
// consumes such messages through the claim logic instead: the business key is claimed
// (processing, with a lease), the remote part runs under the key's downstream key, and the
// local write completes the key (completed). A consumer that dies in between leaves a processing
// key whose lease runs out; the daemon's reclaim job compensates it like any other stuck key —
// it asks the remote service first and completes from its answer, never doing the work twice.
//
//	c, _ := consume.New(db, consume.Config{Consumer: "fulfillment", Queue: "fulfillment.payments",
//		BusinessKey: byPaymentID}, func(ctx context.Context, tx *gorm.DB, m consume.Message) error {
//		return tx.Exec(`INSERT INTO fulfillments …`).Error // the business write, in the dedup tx
//	})
//	go c.Serve(ctx, amqpURL) // reconnects until ctx ends
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// Message is one delivery as a handler sees it.
type Message struct {
	Body        []byte
	MessageID   string
	RoutingKey  string
	Redelivered bool
	Headers     amqp.Table
}

// Handler does the business write for m in tx, the transaction that also records the dedup
// row. An error rolls both back and the message is handed back for redelivery.
type Handler func(ctx context.Context, tx *gorm.DB, m Message) error

// KeyFunc names a message's tenant and business key. An error marks the message invalid: it
// is rejected without requeue (dead-lettered when the queue has a dead-letter exchange).
type KeyFunc func(m Message) (tenant, businessKey string, err error)

// Config says what to consume and how. Zero fields take the defaults in withDefaults.
type Config struct {
	// Consumer names the consumer: the dedup scope and the consumer tag's prefix.
	Consumer string
	// Queue is consumed; Topology, when set, declares it (and its exchange and binding) on
	// every (re)connection before consuming.
	Queue    string
	Topology *Topology
	// BusinessKey extracts the dedup identity.
	BusinessKey KeyFunc
	// Prefetch bounds unacknowledged deliveries (default 32, at most 1000); Workers handle
	// them concurrently (default 4, at most 64 and at most Prefetch).
	Prefetch int
	Workers  int
	// Batch is how many deliveries already waiting a worker takes into one transaction
	// (default 16, at most 256): one statement records their dedup rows. When any of them
	// fails, the batch is rolled back and each is handled in a transaction of its own, so
	// only the failing one is handed back.
	Batch int
	// RetryDelay is the pause before a message whose handling failed is handed back (default
	// 200 ms), so that a failing handler does not spin.
	RetryDelay time.Duration
	// Reconnect is Serve's pause between connection attempts (default 1 s).
	Reconnect time.Duration
	Logger    *slog.Logger
	// Stores, when set, routes each message to its tenant's claim store (a deployment of cells:
	// cells.Set.StoreFor): New's dedup row and business write commit in that store's database,
	// NewSpanning's key is claimed in that store. A message whose tenant has no store is handed
	// back (after RetryDelay) and logged, never consumed into another cell. Nil: every message
	// goes to the database or store the consumer was made with.
	Stores func(tenant string) (*claim.Store, error)
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefetch == 0 {
		c.Prefetch = 32
	}
	if c.Workers == 0 {
		c.Workers = min(4, c.Prefetch)
	}
	if c.Batch == 0 {
		c.Batch = 16
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 200 * time.Millisecond
	}
	if c.Reconnect == 0 {
		c.Reconnect = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Consumer == "":
		return c, errors.New("consume: Consumer (the consumer's name) is required")
	case c.Queue == "":
		return c, errors.New("consume: Queue is required")
	case c.BusinessKey == nil:
		return c, errors.New("consume: BusinessKey is required (dedupe by business key, not message id)")
	case c.Prefetch < 1 || c.Prefetch > 1000:
		return c, fmt.Errorf("consume: Prefetch %d is outside 1..1000", c.Prefetch)
	case c.Workers < 1 || c.Workers > 64 || c.Workers > c.Prefetch:
		return c, fmt.Errorf("consume: Workers %d is outside 1..min(64, Prefetch)", c.Workers)
	case c.Batch < 1 || c.Batch > 256:
		return c, fmt.Errorf("consume: Batch %d is outside 1..256", c.Batch)
	}
	return c, nil
}

// Stats counts what a Consumer did since it was made.
type Stats struct {
	Processed  int64 // business write committed, then acknowledged
	Duplicates int64 // dropped: the business key was already consumed
	Retried    int64 // handled with an error (or in progress elsewhere) and handed back
	Invalid    int64 // no business key: rejected
	AckErrors  int64 // committed but the ack did not reach the broker (the redelivery is a duplicate)
	Batches    int64 // transactions that handled several deliveries at once
}

// Consumer consumes one queue idempotently. Make it with New or NewSpanning.
type Consumer struct {
	cfg     Config
	process func(ctx context.Context, m Message, tenant, key string) outcome
	// processBatch handles several deliveries in one transaction; an error means none of
	// them took effect (each is then handled alone). Nil: one at a time.
	processBatch func(ctx context.Context, items []item) ([]outcome, error)
	stats        struct{ processed, duplicates, retried, invalid, ackErrors, batches atomic.Int64 }
	// changed signals a change of stats (see StatsChanged).
	changed chan struct{}
}

// bump counts one event in n and signals the change.
func (c *Consumer) bump(n *atomic.Int64) {
	n.Add(1)
	select {
	case c.changed <- struct{}{}:
	default: // a signal is pending: whoever waits reads Stats afresh anyway
	}
}

// StatsChanged receives a signal after each change of Stats (at most one waits), so a caller —
// a health check, a test — waits for the consumer's event instead of polling Stats.
func (c *Consumer) StatsChanged() <-chan struct{} { return c.changed }

type outcome int

const (
	outProcessed outcome = iota
	outDuplicate
	outRetry
)

// item is one delivery with its business key, in a batch.
type item struct {
	d           amqp.Delivery
	m           Message
	tenant, key string
}

// New makes a consumer whose whole business write is local: the dedup row and handle's write
// commit in one transaction on db.
func New(db *gorm.DB, cfg Config, handle Handler) (*Consumer, error) {
	c, err := newConsumer(cfg, db != nil && handle != nil, "a database and a handler")
	if err != nil {
		return nil, err
	}
	cfg = c.cfg
	c.process = func(ctx context.Context, m Message, tenant, key string) outcome {
		db, ok := c.dbFor(db, tenant)
		if !ok {
			return outRetry
		}
		first := false
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			first, err = claim.RecordConsumed(ctx, tx, claim.Consumed{Consumer: cfg.Consumer, Tenant: tenant,
				BusinessKey: key, MessageID: m.MessageID})
			if err != nil || !first {
				return err // a duplicate commits only its count
			}
			return handle(ctx, tx, m)
		})
		switch {
		case err != nil:
			cfg.Logger.Warn("consume: handling failed; the message is handed back", "consumer", cfg.Consumer, "err", err)
			return outRetry
		case first:
			return outProcessed
		default:
			return outDuplicate
		}
	}
	c.processBatch = func(ctx context.Context, items []item) ([]outcome, error) {
		db, err := c.batchDB(db, items)
		if err != nil {
			return nil, err
		}
		outs := make([]outcome, len(items))
		err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			cs := make([]claim.Consumed, len(items))
			for i, it := range items {
				cs[i] = claim.Consumed{Consumer: cfg.Consumer, Tenant: it.tenant, BusinessKey: it.key, MessageID: it.m.MessageID}
			}
			first, err := claim.RecordConsumedBatch(ctx, tx, cfg.Consumer, cs)
			if err != nil {
				return err
			}
			for i, it := range items {
				outs[i] = outDuplicate
				if first[i] {
					if err := handle(ctx, tx, it.m); err != nil {
						return err
					}
					outs[i] = outProcessed
				}
			}
			return nil
		})
		return outs, err
	}
	return c, nil
}

// newConsumer is the consumer New and NewSpanning build on: cfg with its defaults, refused when
// given is false (what the constructor needs, named by needs, is missing).
func newConsumer(cfg Config, given bool, needs string) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, errors.New("consume: " + needs + " are required")
	}
	return &Consumer{cfg: cfg, changed: make(chan struct{}, 1)}, nil
}

// Stats returns the counters so far.
func (c *Consumer) Stats() Stats {
	return Stats{Processed: c.stats.processed.Load(), Duplicates: c.stats.duplicates.Load(),
		Retried: c.stats.retried.Load(), Invalid: c.stats.invalid.Load(), AckErrors: c.stats.ackErrors.Load(), Batches: c.stats.batches.Load()}
}

// Serve consumes until ctx ends, reconnecting (after Config.Reconnect) whenever the connection
// or channel is lost — a broker restart included. Unacknowledged deliveries of a lost channel
// are redelivered by the broker, and dropped as duplicates when their work had committed.
func (c *Consumer) Serve(ctx context.Context, url string) error {
	for {
		err := c.serveOnce(ctx, url)
		if ctx.Err() != nil {
			return nil
		}
		c.cfg.Logger.Warn("consume: connection lost; reconnecting", "consumer", c.cfg.Consumer, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.Reconnect):
		}
	}
}

func (c *Consumer) serveOnce(ctx context.Context, url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return c.Run(ctx, ch)
}

// Run consumes from ch until ctx ends (nil) or the channel closes (an error). Deliveries in
// hand when ctx ends are finished (their transactions commit and are acknowledged) first.
func (c *Consumer) Run(ctx context.Context, ch *amqp.Channel) error {
	if c.cfg.Topology != nil {
		if err := c.cfg.Topology.Declare(ch); err != nil {
			return err
		}
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("consume: prefetch: %w", err)
	}
	tag := fmt.Sprintf("%s-%d", c.cfg.Consumer, time.Now().UnixNano())
	deliveries, err := ch.ConsumeWithContext(context.WithoutCancel(ctx), c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The deliveries channel closes when the consumer is cancelled or the channel
			// dies; what was delivered before is finished first.
			for d := range deliveries {
				batch := []amqp.Delivery{d}
				// Take what is already waiting, yielding twice at most so that the client's
				// delivery goroutine can hand over the next one: never wait for more.
			more:
				for misses := 0; len(batch) < c.cfg.Batch && misses < 3; {
					select {
					case d, ok := <-deliveries:
						if !ok {
							break more
						}
						batch, misses = append(batch, d), 0
					default:
						misses++
						runtime.Gosched()
					}
				}
				c.handleBatch(context.WithoutCancel(ctx), batch)
			}
		}()
	}
	defer wg.Wait()
	select {
	case <-ctx.Done():
		_ = ch.Cancel(tag, false)
		return nil
	case e := <-closed:
		if e == nil {
			return errors.New("consume: channel closed")
		}
		return e
	}
}

// handleBatch handles deliveries that were waiting together, grouped by the database they go to
// (Config.Stores; one group without it).
func (c *Consumer) handleBatch(ctx context.Context, ds []amqp.Delivery) {
	var items []item
	for _, d := range ds {
		m := Message{Body: d.Body, MessageID: d.MessageId, RoutingKey: d.RoutingKey, Redelivered: d.Redelivered, Headers: d.Headers}
		tenant, key, err := c.cfg.BusinessKey(m)
		if err != nil || key == "" {
			c.bump(&c.stats.invalid)
			c.cfg.Logger.Warn("consume: message without a business key rejected", "consumer", c.cfg.Consumer, "err", err)
			_ = d.Reject(false)
			continue
		}
		items = append(items, item{d: d, m: m, tenant: tenant, key: key})
	}
	for _, group := range c.byStore(items) {
		c.handleTogether(ctx, group)
	}
}

// handleTogether handles deliveries bound for one database: one transaction when there are
// several and the consumer supports it, else (or when that transaction fails) one each.
func (c *Consumer) handleTogether(ctx context.Context, items []item) {
	if len(items) > 1 && c.processBatch != nil {
		if outs, err := c.processBatchSafely(ctx, items); err == nil {
			c.bump(&c.stats.batches)
			for i, it := range items {
				c.settle(it.d, outs[i])
			}
			return
		}
	}
	for _, it := range items {
		c.settle(it.d, c.processSafely(ctx, it))
	}
}

// processSafely is process with a panic of the consumer's own code recovered where it happens,
// so one bad message does not take the consumer's process down: its transaction rolled back (a
// spanning consumer's Operation panics are recovered by claim, its key held), and the delivery
// is handed back like one that failed.
func (c *Consumer) processSafely(ctx context.Context, it item) (o outcome) {
	defer func() {
		if p := claim.RecoveredPanic("consume", recover()); p != nil {
			c.cfg.Logger.Error("consume: handler panicked; the message is handed back", "consumer", c.cfg.Consumer, "panic_type", p.Type)
			o = outRetry
		}
	}()
	return c.process(ctx, it.m, it.tenant, it.key)
}

// processBatchSafely is processBatch with a panic recovered as an error: the batch's transaction
// rolled back, and its deliveries are then handled one by one.
func (c *Consumer) processBatchSafely(ctx context.Context, items []item) (outs []outcome, err error) {
	defer func() {
		if p := claim.RecoveredPanic("consume", recover()); p != nil {
			c.cfg.Logger.Error("consume: batch handler panicked; handling the batch one by one", "consumer", c.cfg.Consumer, "panic_type", p.Type)
			outs, err = nil, p
		}
	}()
	return c.processBatch(ctx, items)
}

// settle acknowledges a delivery whose transaction committed (processed or duplicate), or
// hands back (nack + requeue, after RetryDelay) one that failed.
func (c *Consumer) settle(d amqp.Delivery, o outcome) {
	switch o {
	case outProcessed, outDuplicate:
		if err := d.Ack(false); err != nil {
			// Committed, not acknowledged: the broker redelivers it and the dedup row drops it.
			c.bump(&c.stats.ackErrors)
		}
		if o == outProcessed {
			c.bump(&c.stats.processed)
		} else {
			c.bump(&c.stats.duplicates)
		}
	default:
		c.bump(&c.stats.retried)
		time.Sleep(c.cfg.RetryDelay)
		_ = d.Nack(false, true)
	}
}

// Topology is an exchange, a queue and the binding between them, all durable, declared by
// publisher and consumer alike so that neither depends on the other having started first.
type Topology struct {
	Exchange   string // a durable topic exchange
	Queue      string // a durable queue
	RoutingKey string // the binding key ("#" for everything)
}

// Declare declares the exchange, the queue and the binding on ch (idempotent at the broker).
func (t *Topology) Declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.Queue, err)
	}
	if err := ch.QueueBind(t.Queue, t.RoutingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s: %w", t.Queue, err)
	}
	return nil
}
