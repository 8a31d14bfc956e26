package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

const notifyOp = "notify.shipped"

// fakeDownstream records what arrives. With dedupe, a second send under the same downstream
// key is acknowledged but not delivered again (a downstream with idempotency).
type fakeDownstream struct {
	dedupe     bool
	failWith   error
	afterSend  func() // runs after a send was delivered, before Send returns
	mu         sync.Mutex
	sends      int
	lookups    int
	deliveries map[string]int
}

func newDownstream(dedupe bool) *fakeDownstream {
	return &fakeDownstream{dedupe: dedupe, deliveries: map[string]int{}}
}

func (f *fakeDownstream) Send(_ context.Context, key string, payload []byte) error {
	if !json.Valid(payload) {
		return errors.New("payload is not JSON")
	}
	f.mu.Lock()
	f.sends++
	if f.failWith != nil {
		f.mu.Unlock()
		return f.failWith
	}
	if !f.dedupe || f.deliveries[key] == 0 {
		f.deliveries[key]++
	}
	hook := f.afterSend
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func (f *fakeDownstream) counts(key string) (sends, lookups, deliveries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sends, f.lookups, f.deliveries[key]
}

// lookingDownstream has no idempotency; the relay must ask it before any resend.
type lookingDownstream struct{ *fakeDownstream }

func (l lookingDownstream) Lookup(_ context.Context, key string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lookups++
	return l.deliveries[key] > 0, nil
}

func enqueue(t *testing.T, db *gorm.DB, key string) {
	t.Helper()
	err := claim.Enqueue(context.Background(), db, claim.OutboxMessage{Operation: notifyOp, DownstreamKey: key,
		Payload: json.RawMessage(`{"order":"o-1","event":"shipped"}`)})
	if err != nil {
		t.Fatal(err)
	}
}

func newRelay(t *testing.T, db *gorm.DB, s daemon.Sender, tune func(*daemon.OutboxConfig)) *daemon.OutboxRelay {
	t.Helper()
	cfg := daemon.OutboxConfig{SendTimeout: 100 * time.Millisecond, SendLease: 300 * time.Millisecond,
		BaseBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: quiet}
	if tune != nil {
		tune(&cfg)
	}
	r, err := daemon.NewOutboxRelay(db, daemon.SenderMap{notifyOp: s}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func outboxRow(t *testing.T, db *gorm.DB) daemon.OutboxRow {
	t.Helper()
	rows, err := daemon.ListOutbox(context.Background(), db, daemon.OutboxFilter{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("outbox rows %+v, %v", rows, err)
	}
	return rows[0]
}

// relayUntilSent runs r until the only row is sent (bounded).
func relayUntilSent(t *testing.T, r *daemon.OutboxRelay, db *gorm.DB) {
	t.Helper()
	passUntil(t, db, 100, "the row sent", func() {
		if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return outboxRow(t, db).State == "sent"
	})
}

// crashAfterDelivery makes the first relay "die" right after downstream got the message: its
// database handle closes before it can record "sent".
func crashAfterDelivery(t *testing.T, url string, down *fakeDownstream, s daemon.Sender) {
	t.Helper()
	dbA := open(t, url)
	down.afterSend = func() { closeDB(dbA) }
	relayA := newRelay(t, dbA, s, nil)
	// Its next claim fails too: the "process" is gone.
	stats, _ := relayA.RunOnce(context.Background(), nil, daemon.NopProgress{})
	if stats["claimed"] != 1 || stats["sent"] != 0 || stats["error"] != 1 {
		t.Fatalf("dying relay: %v; want the row claimed and not marked sent", stats)
	}
	down.mu.Lock()
	down.afterSend = nil
	down.mu.Unlock()
}

func TestOutbox_RelayKilledBetweenSendAndMarkSentDeliversOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	enqueue(t, db, "dk-1")
	down := newDownstream(true)
	crashAfterDelivery(t, url, down, down)
	if row := outboxRow(t, db); row.State != "sending" || row.Attempts != 1 {
		t.Fatalf("after the crash: %+v, want sending with one attempt", row)
	}

	relayUntilSent(t, newRelay(t, open(t, url), down, nil), db)
	sends, _, deliveries := down.counts("dk-1")
	if sends != 2 || deliveries != 1 {
		t.Fatalf("sent %d times, delivered %d; want a resend under the same key, delivered once", sends, deliveries)
	}
	if row := outboxRow(t, db); row.Attempts != 2 || row.SentAt == nil || row.LastError != nil {
		t.Fatalf("row %+v", row)
	}
}

func TestOutbox_NonIdempotentDownstreamIsLookedUpBeforeResend(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	enqueue(t, db, "dk-1")
	down := newDownstream(false)
	looking := lookingDownstream{down}
	crashAfterDelivery(t, url, down, looking)

	relayUntilSent(t, newRelay(t, open(t, url), looking, nil), db)
	sends, lookups, deliveries := down.counts("dk-1")
	if sends != 1 || lookups != 1 || deliveries != 1 {
		t.Fatalf("sends %d, lookups %d, deliveries %d; want the resend replaced by one lookup", sends, lookups, deliveries)
	}
}

func TestOutbox_FirstSendIsNotLookedUp(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-1")
	down := newDownstream(false)
	relayUntilSent(t, newRelay(t, db, lookingDownstream{down}, nil), db)
	if sends, lookups, deliveries := down.counts("dk-1"); sends != 1 || lookups != 0 || deliveries != 1 {
		t.Fatalf("sends %d, lookups %d, deliveries %d", sends, lookups, deliveries)
	}
}

func TestOutbox_BackoffAndCapLeaveAFailedRowVisible(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-1")
	down := newDownstream(true)
	down.failWith = errors.New("503 from downstream\nretry later")
	r := newRelay(t, db, down, func(c *daemon.OutboxConfig) { // a claim no stall lets lapse: 3 attempts are 3 sends
		c.MaxAttempts, c.BaseBackoff, c.MaxBackoff, c.SendLease = 3, 200*time.Millisecond, 400*time.Millisecond, time.Minute
	})

	stats, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{})
	if err != nil || stats["retry"] != 1 {
		t.Fatalf("first pass %v, %v", stats, err)
	}
	row := outboxRow(t, db)
	if row.State != "pending" || row.Attempts != 1 || !row.NextAttemptAt.After(time.Now().Add(-time.Second)) {
		t.Fatalf("after one failure %+v", row)
	}
	// Not due during the backoff.
	if stats, _ := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); stats["claimed"] != 0 {
		t.Fatalf("claimed again inside the backoff: %v", stats)
	}
	passUntil(t, db, 100, "the row failed", func() {
		if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return outboxRow(t, db).State == "failed"
	})
	row = outboxRow(t, db)
	if row.Attempts != 3 || row.LastError == nil || *row.LastError != "503 from downstream" {
		t.Fatalf("failed row %+v, want 3 attempts and a one-line last error", row)
	}
	if sends, _, _ := down.counts("dk-1"); sends != 3 {
		t.Fatalf("sent %d times, want the cap of 3", sends)
	}
	failed, _ := daemon.ListOutbox(context.Background(), db, daemon.OutboxFilter{State: "failed"})
	if len(failed) != 1 {
		t.Fatalf("failed rows %+v", failed)
	}

	// An operator retries it once the downstream is back.
	down.mu.Lock()
	down.failWith = nil
	down.mu.Unlock()
	if err := daemon.RetryOutbox(context.Background(), db, row.ID); err != nil {
		t.Fatal(err)
	}
	relayUntilSent(t, r, db)
	if err := daemon.RetryOutbox(context.Background(), db, row.ID); !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Fatalf("retrying a sent row: %v", err)
	}
}

// A permanent error is sent once and fails the row at once. The claim holds for longer than any
// stall of a loaded machine: with the shared 300 ms, a stall between the claim and the send's fence
// let the claim lapse, the row was claimed again, and it failed on its second attempt (one send).
func TestOutbox_PermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	enqueue(t, db, "dk-1")
	down := newDownstream(true)
	down.failWith = daemon.Permanent(errors.New("400 invalid address"))
	r := newRelay(t, db, down, func(c *daemon.OutboxConfig) { c.SendLease = time.Minute })
	if _, err := r.RunOnce(context.Background(), nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}
	if row := outboxRow(t, db); row.State != "failed" || row.Attempts != 1 || row.LastError == nil || !strings.Contains(*row.LastError, "400 invalid address") {
		t.Fatalf("row %+v", row)
	}
	if sends, _, _ := down.counts("dk-1"); sends != 1 {
		t.Fatalf("sent %d times, want once", sends)
	}
}

func TestOutboxConfig_BackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	c := daemon.OutboxConfig{BaseBackoff: time.Second, MaxBackoff: 5 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := c.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := c.Backoff(1000); got != 5*time.Second {
		t.Errorf("Backoff(1000) = %s", got)
	}
	db := pgtest.New(t)
	for _, bad := range []daemon.OutboxConfig{{SendTimeout: time.Minute, SendLease: time.Second}, {MaxAttempts: 1000},
		{BaseBackoff: time.Minute, MaxBackoff: time.Second}} {
		if _, err := daemon.NewOutboxRelay(db, daemon.SenderMap{}, bad); !errors.Is(err, daemon.ErrInvalidConfig) {
			t.Errorf("NewOutboxRelay(%+v) = %v", bad, err)
		}
	}
}
