package downstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
)

// fakeOrders is a downstream that deduplicates orders on the X-Request-Key header.
type fakeOrders struct {
	mu     sync.Mutex
	orders map[string]map[string]any
	posts  int
	seen   []http.Header
}

func (f *fakeOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, r.Header.Clone())
	key := r.Header.Get("X-Request-Key")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/orders":
		f.posts++
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		switch body["amount_minor"] {
		case 13.0:
			w.WriteHeader(http.StatusPaymentRequired)
			return
		case 50.0:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case 99.0:
			// Slower than the execute timeout: answers only after the client has given up.
			f.mu.Unlock()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			f.mu.Lock()
		}
		state := "open"
		if body["amount_minor"] == 77.0 {
			state = "rejected"
		}
		o, ok := f.orders[key]
		if !ok {
			o = map[string]any{"data": map[string]any{"id": "ord_" + key, "state": state}, "echo": body}
			f.orders[key] = o
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(o)
	case r.Method == http.MethodGet:
		k := r.URL.Path[len("/orders/"):]
		if k == "boom" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		o, ok := f.orders[k]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(o)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func newOrdersOp(t *testing.T) (*downstream.HTTPOperation, *fakeOrders) {
	t.Helper()
	f := &fakeOrders{orders: map[string]map[string]any{}}
	ts := httptest.NewServer(f) // listens on 127.0.0.1
	t.Cleanup(ts.Close)
	op, err := downstream.NewHTTPOperation(downstream.OperationConfig{
		Name:      "order.create",
		Intent:    downstream.IntentConfig{Ignore: []string{"client_ts"}, AmountField: "amount_minor"},
		KeyHeader: "X-Request-Key",
		Execute:   downstream.ExecuteConfig{URL: ts.URL + "/orders", KeyField: "order_no"},
		Lookup:    downstream.LookupConfig{URL: ts.URL + "/orders/{downstream_key}"},
		// Long enough for a loaded CI machine to answer the others (200 ms was not), short
		// enough for the timeout test.
		Timeouts: downstream.TimeoutConfig{Execute: 2 * time.Second},
		Response: downstream.ResponseConfig{ResourceID: "data.id", Status: "data.state", FailedValues: []string{"rejected"}, FailureStatus: 409},
	}, ts.Client())
	if err != nil {
		t.Fatal(err)
	}
	return op, f
}

func lease(dkey, intent string) *claim.Lease {
	return &claim.Lease{DownstreamKey: dkey, Intent: json.RawMessage(intent)}
}

func TestHTTPOperation_ExecuteSendsTheDownstreamKeyAndReadsTheResourceID(t *testing.T) {
	t.Parallel()
	op, f := newOrdersOp(t)
	doc, err := op.Execute(context.Background(), lease("dk1", `{"amount_minor":100}`))
	if err != nil {
		t.Fatal(err)
	}
	if doc.ResourceID != "ord_dk1" || doc.Failure != nil {
		t.Fatalf("doc = %+v", doc)
	}
	var body struct {
		Echo map[string]any `json:"echo"`
	}
	json.Unmarshal(doc.Body, &body)
	if body.Echo["order_no"] != "dk1" || body.Echo["amount_minor"] != 100.0 {
		t.Fatalf("downstream saw %v, want the intent plus order_no = the downstream key", body.Echo)
	}
	if h := f.seen[0]; h.Get("X-Request-Key") != "dk1" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers = %v", h)
	}
}

func TestHTTPOperation_ExecuteSortsAnswers(t *testing.T) {
	t.Parallel()
	op, _ := newOrdersOp(t)
	ctx := context.Background()

	_, err := op.Execute(ctx, lease("dk2", `{"amount_minor":13}`))
	var f *claim.Failure
	if !errors.As(err, &f) || f.Retryable || f.Code != "downstream_402" || f.Snapshot == nil || f.Snapshot.Status != 409 {
		t.Errorf("402 (failed_final): %v %+v", err, f)
	}
	_, err = op.Execute(ctx, lease("dk3", `{"amount_minor":50}`))
	if !errors.As(err, &f) || !f.Retryable {
		t.Errorf("503 (failed_retryable): %v", err)
	}
	doc, err := op.Execute(ctx, lease("dk4", `{"amount_minor":77}`))
	if err != nil || doc.Failure == nil || doc.Failure.Retryable || doc.ResourceID != "ord_dk4" {
		t.Errorf("found with a failed status value: %+v, %v; want a document with a final failure", doc, err)
	}
	_, err = op.Execute(ctx, lease("dk5", `{"amount_minor":99}`))
	if err == nil || errors.As(err, &f) {
		t.Errorf("timeout: %v, want an ambiguous (plain) error", err)
	}
}

func TestHTTPOperation_Lookup(t *testing.T) {
	t.Parallel()
	op, f := newOrdersOp(t)
	ctx := context.Background()
	if doc, err := op.Lookup(ctx, lease("dk1", `{}`)); doc != nil || err != nil {
		t.Fatalf("before execute: %+v, %v; want (nil, nil)", doc, err)
	}
	if _, err := op.Execute(ctx, lease("dk1", `{"amount_minor":1}`)); err != nil {
		t.Fatal(err)
	}
	doc, err := op.Lookup(ctx, lease("dk1", `{}`))
	if err != nil || doc.ResourceID != "ord_dk1" {
		t.Fatalf("after execute: %+v, %v", doc, err)
	}
	if _, err := op.Lookup(ctx, lease("boom", `{}`)); err == nil {
		t.Fatal("500 on lookup: want an error (downstream cannot answer)")
	}
	if f.posts != 1 {
		t.Fatalf("lookups posted: %d posts", f.posts)
	}
}

func TestHTTPOperation_ApplyDefaultAndOverride(t *testing.T) {
	t.Parallel()
	op, _ := newOrdersOp(t)
	ctx := context.Background()
	doc, err := op.Execute(ctx, lease("dk9", `{"amount_minor":5}`))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := op.Apply(ctx, nil, lease("dk9", `{}`), doc)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != 201 || snap.Headers["Content-Type"] != "application/json" || snap.ResourceID != "ord_dk9" ||
		string(snap.Body) != `{"resource_id":"ord_dk9","status":"open"}` {
		t.Fatalf("default snapshot = %+v (%s)", snap, snap.Body)
	}
	op.ApplyFunc = func(_ context.Context, _ *gorm.DB, _ *claim.Lease, d *claim.Document) (*claim.Snapshot, error) {
		return &claim.Snapshot{Status: 200, ResourceID: "custom-" + d.ResourceID}, nil
	}
	snap, _ = op.Apply(ctx, nil, lease("dk9", `{}`), doc)
	if snap.ResourceID != "custom-ord_dk9" {
		t.Fatalf("override not used: %+v", snap)
	}
}

func TestHTTPOperation_FromTheExampleFileAgainstPaysim(t *testing.T) {
	t.Parallel()
	sim, err := paysim.NewServer(paysim.Config{DeclinePayees: []string{"blocked"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { ts.Close(); sim.Close() })
	raw, err := os.ReadFile("testdata/paysim-ops.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := downstream.ParseConfig("paysim-ops.yaml", []byte(strings.ReplaceAll(string(raw), "http://127.0.0.1:8090", ts.URL)))
	if err != nil {
		t.Fatal(err)
	}
	reg := downstream.NewRegistry()
	if err := reg.RegisterConfig(cfg, ts.Client()); err != nil {
		t.Fatal(err)
	}
	op, err := reg.Get("payment.charge.http")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := lease("dk-http", `{"amount_minor":250,"currency":"CNY","merchant_order_no":"M-9","payee":"alice"}`)
	if doc, err := op.Lookup(ctx, l); doc != nil || err != nil {
		t.Fatalf("lookup before: %+v, %v", doc, err)
	}
	doc, err := op.Execute(ctx, l)
	if err != nil || doc.Failure != nil || !strings.HasPrefix(doc.ResourceID, "ch_") {
		t.Fatalf("execute: %+v, %v", doc, err)
	}
	again, err := op.Execute(ctx, l)
	if err != nil || again.ResourceID != doc.ResourceID || sim.ChargeCount("dk-http") != 1 {
		t.Fatalf("re-execute with the same downstream key: %+v, %v; want the same charge", again, err)
	}
	found, err := op.Lookup(ctx, l)
	if err != nil || found.ResourceID != doc.ResourceID {
		t.Fatalf("lookup after: %+v, %v", found, err)
	}
	declined, err := op.Execute(ctx, lease("dk-declined", `{"amount_minor":1,"currency":"CNY","payee":"blocked"}`))
	if err != nil || declined.Failure == nil || declined.Failure.Snapshot.Status != 402 {
		t.Fatalf("declined: %+v, %v; want a final failure replayed as 402", declined, err)
	}
}
