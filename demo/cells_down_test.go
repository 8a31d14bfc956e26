package demo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestWorld_ACellDownAtStart: the payments service starts while cell b's database resets every
// connection. acme (cell a) pays over HTTP and gRPC throughout; globex (cell b) is answered as
// in a failover — 503 store-unavailable with Retry-After, gRPC Unavailable STORE_UNAVAILABLE —
// with nothing charged, and gRPC health names cell b NOT_SERVING while the server stays
// SERVING. Once b answers, globex's same key pays, and health follows.
func TestWorld_ACellDownAtStart(t *testing.T) {
	t.Parallel()
	lateURL, up := pgtest.Late(t, pgtest.URL(t))
	path := filepath.Join(t.TempDir(), "cells.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		pgtest.URL(t), lateURL), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := cells.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	set, err := cells.Open(context.Background(), m, cells.Options{Migrate: true, Claim: claim.Config{DigestSecret: []byte("demo-test-secret-0123")},
		RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("open with cell b down: %v", err)
	}
	t.Cleanup(set.Close)
	control := set.Control()
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: control.DB, Store: control.Store, Paysim: paysim.Config{Seed: 21},
		Tenants: []string{"acme", "globex"}, Stores: set.StoreFor, Cells: set.Stores})
	if err != nil {
		t.Fatalf("start the world with cell b down: %v", err)
	}
	t.Cleanup(w.Close)
	e := &env{t: t, w: w, store: control.Store, key: w.APIKey("acme"), db: control.DB}
	c := e.grpc()
	globex := w.APIKey("globex")

	if r := e.pay("pay-1", body); r.status != 201 {
		t.Fatalf("acme pays with cell b down: %d %v", r.status, r.body)
	}
	r := e.post("/v1/payments", body, globex, "Idempotency-Key", "pay-1")
	if typ, _ := r.body["type"].(string); r.status != 503 || r.header.Get("Retry-After") != "1" || !strings.HasSuffix(typ, "store-unavailable") {
		t.Errorf("globex pays with its cell down: %d Retry-After %q %v; want 503 store-unavailable, Retry-After 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	if g := c.charge(e.key, "g-1", grpcCharge); g.err != nil {
		t.Errorf("acme charges over gRPC with cell b down: %v", g.err)
	}
	wantGRPC(t, c.charge(globex, "g-1", grpcCharge), codes.Unavailable, grpcidem.ReasonStoreUnavailable)
	for _, key := range []string{"pay-1", "g-1"} {
		if n := w.Paysim.ChargeCount(claim.DownstreamKey("globex", demo.OperationCharge, key)); n != 0 {
			t.Errorf("globex's %s charged %d times while its cell was down", key, n)
		}
	}
	health := healthpb.NewHealthClient(c.cc)
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{"": healthpb.HealthCheckResponse_SERVING,
		"cell/a": healthpb.HealthCheckResponse_SERVING, "cell/b": healthpb.HealthCheckResponse_NOT_SERVING} {
		if h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc}); err != nil || h.Status != want {
			t.Errorf("health %q with cell b down: %v %v, want %v", svc, h.GetStatus(), err, want)
		}
	}

	up()
	b, _ := set.Cell("b")
	select {
	case <-b.Up():
	case <-time.After(60 * time.Second):
		t.Fatalf("cell b not up a minute after its database answers: %v", b.Err())
	}
	if r := e.post("/v1/payments", body, globex, "Idempotency-Key", "pay-1"); r.status != 201 {
		t.Errorf("globex pays the same key once its cell is up: %d %v", r.status, r.body)
	}
	if g := c.charge(globex, "g-1", grpcCharge); g.err != nil {
		t.Errorf("globex charges over gRPC once its cell is up: %v", g.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "cell/b"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, err := watch.Recv()
		if err != nil {
			t.Fatalf("health of cell/b not SERVING 30 s after it is up: %v", err)
		}
		if h.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
}
