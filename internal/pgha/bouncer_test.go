package pgha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// memOp is a downstream in memory that counts executions per downstream key.
type memOp struct {
	mu    sync.Mutex
	docs  map[string]*claim.Document
	execs map[string]int
	gate  chan struct{} // an execution waits until it is closed (a charge in progress)
}

func (m *memOp) Name() string { return "payment.charge" }
func (m *memOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{Ignore: []string{"client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"}
}
func (m *memOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	select {
	case <-m.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.execs[l.DownstreamKey]++
	doc := &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:10]}
	m.docs[l.DownstreamKey] = doc
	return doc, nil
}
func (m *memOp) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.docs[l.DownstreamKey], nil
}
func (m *memOp) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	// A business row in the completing transaction, as the demo writes its payment.
	if err := tx.WithContext(ctx).Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, 'applied', 'test', '{}')`,
		l.KeyID).Error; err != nil {
		return nil, err
	}
	return &claim.Snapshot{Status: 201, Body: []byte(`{"id":"` + doc.ResourceID + `"}`), ResourceID: doc.ResourceID}, nil
}

// TestBouncer_ClaimPathThroughTransactionPooling runs the claim core through pgbouncer in
// transaction pooling mode with 2 server connections under 24 clients, so consecutive
// transactions of one client land on different server connections: racing duplicates execute
// once, distinct keys all complete, a stalled key is taken over and recovered from downstream,
// a released first claim leaves nothing, and the daemon's leader election works. Nothing may
// depend on session state (named prepared statements, session settings).
func TestBouncer_ClaimPathThroughTransactionPooling(t *testing.T) {
	ctx := context.Background()
	raw := pgtest.URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	port := 0
	fmt.Sscan(u.Port(), &port)
	b, err := pgha.StartBouncer(ctx, pgha.BouncerOptions{Host: u.Hostname(), Port: port, PoolSize: 2,
		Users: []string{u.User.Username()}})
	if err != nil { // a missing pgbouncer is a failure naming what to install, never a skip
		t.Fatal(err)
	}
	defer b.Stop()
	// The one setting a transaction pooler needs: no named prepared statements kept per session.
	dsn := b.URL(u.User.Username(), u.Path[1:]) + "&default_query_exec_mode=exec"
	db, err := pgpool.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(24)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("bouncer-test-secret-0123"), Owner: "pooled",
		LeaseTTL: 2 * time.Second, Quarantine: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	op := &memOp{docs: map[string]*claim.Document{}, execs: map[string]int{}, gate: make(chan struct{})}
	request := func(key string, amount int) claim.Request {
		return claim.Request{Tenant: "t1", Key: key, Actor: "service:test",
			Intent: json.RawMessage(fmt.Sprintf(`{"amount_minor": %d, "currency": "CNY", "payee": "p", "client_ts": %q}`,
				amount, time.Now().Format(time.RFC3339Nano)))}
	}

	// Racing duplicates: one execution (held until the others are answered), the others are
	// answered in progress or, once it completed, replayed.
	var wg sync.WaitGroup
	var kinds sync.Map
	var failures atomic.Int64
	answered := make(chan struct{}, 24)
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { answered <- struct{}{} }()
			out, err := store.Run(ctx, op, request("dup-1", 500))
			if err != nil {
				failures.Add(1)
				t.Errorf("duplicate run: %v", err)
				return
			}
			n, _ := kinds.LoadOrStore(out.Kind, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}()
	}
	for range 23 {
		<-answered
	}
	close(op.gate) // from now on executions pass at once
	wg.Wait()
	count := func(k claim.Kind) int64 {
		if n, ok := kinds.Load(k); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	if count(claim.Completed) != 1 || count(claim.Completed)+count(claim.InProgress)+count(claim.Replay) != 24-failures.Load() {
		t.Fatalf("racing duplicates: completed %d in progress %d replay %d", count(claim.Completed), count(claim.InProgress), count(claim.Replay))
	}
	if out, err := store.Run(ctx, op, request("dup-1", 500)); err != nil || out.Kind != claim.Replay || out.Snapshot == nil {
		t.Fatalf("replay: %+v %v", out, err)
	}
	if out, err := store.Run(ctx, op, request("dup-1", 501)); err != nil || out.Kind != claim.Mismatch {
		t.Fatalf("another amount: %+v %v", out, err)
	}

	// Distinct keys at once: all complete, each with its business row, in one transaction each.
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := store.Run(ctx, op, request(fmt.Sprintf("k-%d", i), 100+i))
			if err != nil || out.Kind != claim.Completed {
				t.Errorf("key k-%d: %+v %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	var completed, applied int64
	db.Raw(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`).Scan(&completed)
	db.Raw(`SELECT count(*) FROM key_events WHERE kind = 'applied'`).Scan(&applied)
	if completed != 41 || applied != 41 {
		t.Fatalf("%d completed keys, %d business rows; want 41 and 41", completed, applied)
	}
	op.mu.Lock()
	for dk, n := range op.execs {
		if n != 1 {
			t.Errorf("downstream key %s executed %d times", dk, n)
		}
	}
	op.mu.Unlock()

	// A holder that stalled after the charge: its lease lapses, the next attempt takes over,
	// finds the document downstream and completes without executing.
	out, err := store.Claim(ctx, claim.Request{Tenant: "t1", Operation: op.Name(), Key: "stalled", Actor: "service:test",
		Spec: op.Intent(), Intent: request("", 700).Intent})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", out, err)
	}
	if _, err := op.Execute(ctx, out.Lease); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(`UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 second' WHERE id = ?`, out.KeyID).Error; err != nil {
		t.Fatal(err)
	}
	if again, err := store.Run(ctx, op, request("stalled", 700)); err != nil || again.Kind != claim.Recovered {
		t.Fatalf("takeover: %+v %v", again, err)
	}

	// A first claim released before any effect leaves no row.
	out, err = store.Claim(ctx, claim.Request{Tenant: "t1", Operation: op.Name(), Key: "released", Actor: "service:test",
		Spec: op.Intent(), Intent: request("", 800).Intent})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", out, err)
	}
	if err := store.Release(ctx, out.Lease, "invalid input"); err != nil {
		t.Fatal(err)
	}
	var left int64
	db.Raw(`SELECT count(*) FROM idempotency_keys WHERE key = 'released'`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d rows left after release", left)
	}

	// The daemon's election and leadership check (FOR SHARE inside a transaction) through the
	// pooler.
	d, err := daemon.New(daemon.Config{DB: db, Name: "pooled", LeaseTTL: time.Second, RenewEvery: 250 * time.Millisecond,
		PollEvery: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.Start(dctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.Stop(sctx)
		scancel()
	}()
	// The election's writes signal on the database itself (LISTEN does not pass a transaction pooler).
	pgtest.Await(t, pgtest.Open(t, raw), 5*time.Second, "the daemon elected through the pooler", d.IsLeader, "daemon_leader")
}
