package demo_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

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
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
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

	names := map[string]trace.SpanKind{}
	for _, s := range exp.GetSpans() {
		names[s.Name] = s.SpanKind
		for _, a := range s.Attributes {
			if v := a.Value.Emit(); strings.Contains(v, "trace-key-") {
				t.Errorf("span %s carries the raw key in %s=%s", s.Name, a.Key, v)
			}
		}
	}
	for _, want := range []string{"POST /v1/payments", "idemops.demo.v1.Payments/Charge"} {
		if kind, ok := names[want]; !ok || kind != trace.SpanKindServer {
			t.Errorf("no server span %q among %v", want, names)
		}
	}
}
