package claim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("test-secret-0123456789")

// bundle is one test's world: a fresh database, a store and helpers to inspect it.
type bundle struct {
	t     *testing.T
	db    *gorm.DB
	store *claim.Store
}

func setup(t *testing.T, cfgs ...func(*claim.Config)) *bundle {
	t.Helper()
	t.Parallel()
	db := pgtest.New(t)
	cfg := claim.Config{DigestSecret: secret, Owner: "test"}
	for _, f := range cfgs {
		f(&cfg)
	}
	s, err := claim.NewStore(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, db: db, store: s}
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (b *bundle) state(keyID int64) claim.State {
	b.t.Helper()
	k, err := b.store.Get(context.Background(), keyID)
	if err != nil {
		b.t.Fatal(err)
	}
	return k.State
}

func (b *bundle) events(keyID int64) []string {
	b.t.Helper()
	evs, err := b.store.History(context.Background(), keyID, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	kinds := make([]string, len(evs))
	for i, e := range evs {
		kinds[i] = e.Kind
	}
	return kinds
}

// expireLease ages a key's lease (test set-up: simulates a holder that crashed long ago).
func (b *bundle) expireLease(keyID int64) {
	pgtest.Exec(b.t, b.db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id = ?`, keyID)
}

// ageNotFound moves the first not-found back past the quarantine and expires the parking lease.
func (b *bundle) ageNotFound(keyID int64, by time.Duration) {
	pgtest.Exec(b.t, b.db, `UPDATE idempotency_keys SET not_found_at = not_found_at - ? * interval '1 millisecond',
		lease_expires_at = now() - interval '1 second' WHERE id = ?`, by.Milliseconds(), keyID)
}

func payment(amount int, extra ...string) json.RawMessage {
	s := fmt.Sprintf(`{"amount_minor": %d, "currency": "CNY", "payee": "acme", "merchant_order_no": "o-1"`, amount)
	for i := 0; i+1 < len(extra); i += 2 {
		s += fmt.Sprintf(`, %q: %q`, extra[i], extra[i+1])
	}
	return json.RawMessage(s + "}")
}

// fakeOp is a downstream in memory: documents by downstream key, with switches for faults.
type fakeOp struct {
	mu        sync.Mutex
	docs      map[string]*claim.Document
	executes  atomic.Int64
	lookups   atomic.Int64
	applies   atomic.Int64
	execDelay time.Duration
	lookupErr error
	execErr   error
	redrive   bool
	// crashAfterExecute makes Execute store the document downstream and then return an error
	// the way a dropped response looks to the caller.
	crashAfterExecute bool
}

func newFakeOp() *fakeOp { return &fakeOp{docs: map[string]*claim.Document{}} }

func (f *fakeOp) Name() string { return "payment.charge" }
func (f *fakeOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{Ignore: []string{"description", "client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"}
}
func (f *fakeOp) Redrive() bool { return f.redrive }

func (f *fakeOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	f.executes.Add(1)
	if f.execDelay > 0 {
		select {
		case <-time.After(f.execDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.execErr != nil {
		return nil, f.execErr
	}
	doc := &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:8], Body: json.RawMessage(`{"status":"succeeded"}`)}
	f.mu.Lock()
	f.docs[l.DownstreamKey] = doc
	f.mu.Unlock()
	if f.crashAfterExecute {
		return nil, errors.New("connection reset after the charge was committed")
	}
	return doc, nil
}

func (f *fakeOp) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	f.lookups.Add(1)
	if f.lookupErr != nil {
		return nil, f.lookupErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs[l.DownstreamKey], nil
}

func (f *fakeOp) Apply(_ context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	f.applies.Add(1)
	body := fmt.Sprintf(`{"payment_id":%q,"status":"succeeded"}`, doc.ResourceID)
	return &claim.Snapshot{Status: 201, Body: []byte(body), ResourceID: doc.ResourceID,
		Headers: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/" + doc.ResourceID, "Set-Cookie": "s=1"}}, nil
}

func req(key string, intent json.RawMessage) claim.Request {
	return claim.Request{Tenant: "t1", Operation: "payment.charge", Key: key, Intent: intent, Actor: "service:test", Spec: (&fakeOp{}).Intent()}
}
