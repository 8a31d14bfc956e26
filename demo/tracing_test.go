package demo_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestTracing_PaymentsServiceSpansHTTPAndGRPC: with a tracer provider (the SDK's, into an
// in-memory exporter), a payment over HTTP and one over gRPC each leave a server span — named
// by route and by method, never by the key — and no span attribute carries the raw key.
func TestTracing_PaymentsServiceSpansHTTPAndGRPC(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	ended := newEndedSpans()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ended))
	defer tp.Shutdown(context.Background())
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: db, Store: store,
		Paysim: paysim.Config{Seed: 13}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	key := w.APIKey("acme")

	req, _ := http.NewRequest("POST", w.APIURL+"/v1/payments", bytes.NewReader([]byte(
		`{"amount_minor":1234,"currency":"CNY","merchant_order_no":"ord-t","payee":"alice"}`)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "trace-key-http-7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/payments: %v %v", resp, err)
	}
	resp.Body.Close()
	e := &env{t: t, w: w, key: key}
	if r := e.grpc().charge(key, "trace-key-grpc-7", grpcCharge); r.err != nil {
		t.Fatal(r.err)
	}

	// A server span ends after its answer is sent (the gRPC stats handler's End event comes after
	// the status reaches the client): wait for both to end before reading the exporter.
	wanted := []string{"POST /v1/payments", "idemops.demo.v1.Payments/Charge"}
	ended.await(t, wanted...)

	names := map[string]trace.SpanKind{}
	for _, s := range exp.GetSpans() {
		names[s.Name] = s.SpanKind
		for _, a := range s.Attributes {
			if v := a.Value.Emit(); strings.Contains(v, "trace-key-") {
				t.Errorf("span %s carries the raw key in %s=%s", s.Name, a.Key, v)
			}
		}
	}
	for _, want := range wanted {
		if kind, ok := names[want]; !ok || kind != trace.SpanKindServer {
			t.Errorf("no server span %q among %v", want, names)
		}
	}
}

// endedSpans is a span processor that records the names of the spans that have ended and
// signals each end, so that the test waits on the ends it names instead of polling.
type endedSpans struct {
	mu      sync.Mutex
	seen    map[string]bool
	changed chan struct{} // one pending signal at most: a waiter re-reads seen
}

func newEndedSpans() *endedSpans {
	return &endedSpans{seen: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (e *endedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e *endedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	e.mu.Lock()
	e.seen[s.Name()] = true
	e.mu.Unlock()
	select {
	case e.changed <- struct{}{}:
	default:
	}
}
func (e *endedSpans) Shutdown(context.Context) error   { return nil }
func (e *endedSpans) ForceFlush(context.Context) error { return nil }

// await returns once a span of each of names has ended; it fails the test after 10 s.
func (e *endedSpans) await(t *testing.T, names ...string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		var left []string
		e.mu.Lock()
		for _, n := range names {
			if !e.seen[n] {
				left = append(left, n)
			}
		}
		e.mu.Unlock()
		if len(left) == 0 {
			return
		}
		select {
		case <-e.changed:
		case <-timeout:
			t.Fatalf("spans not ended after 10 s: %v", left)
		}
	}
}
