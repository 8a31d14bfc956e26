package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// shipping is the remote part of a spanning consumer: another service's table, written outside
// the consumer's transaction and idempotent by the downstream key.
type shipping struct {
	db       *gorm.DB
	executed atomic.Int32
	crash    atomic.Bool // the next Apply fails as if the consumer died after the remote call
}

func (s *shipping) Name() string              { return "fulfillment.ship" }
func (s *shipping) Intent() claim.IntentSpec  { return claim.IntentSpec{} }
func (s *shipping) ops() daemon.Operations    { return opsMap{s.Name(): consume.Recorded("shipper", s)} }
func (s *shipping) recorded() claim.Operation { return consume.Recorded("shipper", s) }
func (s *shipping) doc(dk string) *claim.Document {
	return &claim.Document{ResourceID: "shp_" + dk[:12]}
}

func (s *shipping) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	s.executed.Add(1)
	err := s.db.WithContext(ctx).Exec(`INSERT INTO remote_shipments (downstream_key) VALUES (?) ON CONFLICT DO NOTHING`, l.DownstreamKey).Error
	if err != nil {
		return nil, err
	}
	return s.doc(l.DownstreamKey), nil
}

func (s *shipping) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	var n int64
	if err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM remote_shipments WHERE downstream_key = ?`, l.DownstreamKey).Scan(&n).Error; err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	return s.doc(l.DownstreamKey), nil
}

func (s *shipping) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if s.crash.CompareAndSwap(true, false) {
		return nil, errors.New("simulated crash after the remote call")
	}
	var e event
	if err := json.Unmarshal(l.Intent, &e); err != nil {
		return nil, err
	}
	if err := tx.WithContext(ctx).Exec(`INSERT INTO effects (order_id, amount_minor) VALUES (?, ?)`, e.OrderID, e.Amount).Error; err != nil {
		return nil, err
	}
	return &claim.Snapshot{Status: 200, ResourceID: doc.ResourceID}, nil
}

type opsMap map[string]claim.Operation

func (m opsMap) Get(name string) (claim.Operation, bool) { op, ok := m[name]; return op, ok }

// TestSpanning_StuckProcessingIsCompensatedByTheDaemon: the consumer dies after the remote call
// and before its local write; the dedup record (a claim key) stays processing; after its lease
// the daemon's reclaim job asks the remote service, finds the shipment and completes the record
// — the remote work is never done twice, and the redelivered message is dropped.
// spanning readies b for a flow that spans services: the remote side's table, a claim store
// with a one-second lease, and the shipping operation that writes it.
func (b *bundle) spanning() (*claim.Store, *shipping) {
	b.t.Helper()
	pgtest.Exec(b.t, b.db, `CREATE TABLE remote_shipments (downstream_key text PRIMARY KEY)`)
	store, err := claim.NewStore(b.db, claim.Config{DigestSecret: []byte("consume-test-secret-01"), LeaseTTL: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.t.Fatal(err)
	}
	return store, &shipping{db: b.db}
}

func TestSpanning_StuckProcessingIsCompensatedByTheDaemon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, ship := b.spanning()
	ship.crash.Store(true)
	cfg := b.config()
	cfg.Consumer = "shipper"
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.RetryDelay = 2 * time.Second // the dead consumer's message waits; the daemon gets there first
	c, err := consume.NewSpanning(store, cfg, ship.recorded())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Serve(ctx, b.url) }()
	b.publish([]event{{Tenant: "acme", OrderID: "ord-7", Amount: 900}})
	waitStats(t, c, "the crash after the remote call", func(s consume.Stats) bool { return s.Retried == 1 })
	cancel() // the consumer is gone; its message goes back to the queue
	wg.Wait()
	if got := b.count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'fulfillment.ship' AND state = 'processing'`); got != 1 {
		t.Fatalf("processing dedup records = %d, want 1", got)
	}

	reclaim, err := daemon.NewReclaimJob(store, ship.ops(), daemon.ReclaimConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// The dead consumer's lease must run out before the reclaimer may take the key over.
	pgtest.SleepUntil(t, b.db, `SELECT lease_expires_at FROM idempotency_keys WHERE operation = 'fulfillment.ship'`)
	if stats, err := reclaim.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil || !stats.Changed() {
		t.Fatalf("the daemon's compensation: %v, %v", stats, err)
	}
	if got := b.count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'fulfillment.ship' AND state = 'completed'`); got != 1 {
		t.Fatalf("completed dedup records = %d, want 1", got)
	}
	if got := b.count(`SELECT count(*) FROM key_events WHERE kind = 'recovered_from_downstream' AND actor = 'daemon'`); got != 1 {
		t.Fatalf("compensations recorded = %d, want 1", got)
	}

	c2, err := consume.NewSpanning(store, cfg, ship.recorded())
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c2, b.url)
	waitStats(t, c2, "the redelivery dropped", func(s consume.Stats) bool { return s.Duplicates == 1 })
	if got := b.count(`SELECT count(*) FROM effects WHERE order_id = 'ord-7'`); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	if got := b.count(`SELECT count(*) FROM remote_shipments`); got != 1 || ship.executed.Load() != 1 {
		t.Fatalf("remote_shipments = %d, remote executions = %d; want 1 and 1", got, ship.executed.Load())
	}
	if got := b.count(`SELECT duplicates FROM consumed_messages WHERE consumer = 'shipper' AND business_key = 'ord-7'`); got != 1 {
		t.Fatalf("dedup row counts %d duplicates, want 1", got)
	}
}
