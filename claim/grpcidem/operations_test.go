package grpcidem_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestServeOperations_HealthFollowsTheStore: grpc.health.v1 says SERVING for the server and its
// services while the store's database answers, NOT_SERVING when it does not, and NOT_SERVING
// for everything once stopped (a balancer drains the server before it stops).
func TestServeOperations_HealthFollowsTheStore(t *testing.T) {
	t.Parallel()
	unreachable, _ := pgtest.Unreachable(t)
	for _, tt := range []struct {
		name string
		db   *gorm.DB
		want healthpb.HealthCheckResponse_ServingStatus
	}{
		{"store up", pgtest.New(t), healthpb.HealthCheckResponse_SERVING},
		{"store down", unreachable, healthpb.HealthCheckResponse_NOT_SERVING},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := claim.NewStore(tt.db, claim.Config{DigestSecret: benchSecret})
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			srv.RegisterService(&grpc.ServiceDesc{ServiceName: "test.v1.Things", HandlerType: (*any)(nil)}, struct{}{})
			stop := grpcidem.ServeOperations(srv, store, grpcidem.HealthConfig{Every: 50 * time.Millisecond})
			hc := serveHealth(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, svc := range []string{"", "test.v1.Things"} {
				if h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || h.Status != tt.want {
					t.Errorf("health of %q: %v %v; want %s", svc, h, err, tt.want)
				}
			}
			stop()
			if h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "test.v1.Things"}); err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("health after stop: %v %v; want NOT_SERVING", h, err)
			}
		})
	}
}

// TestServeOperations_HealthAcrossCellsNamesEachCell: with tenant cells, each cell has a health
// status of its own ("cell/NAME"), and the server and its services stay SERVING while any cell
// answers — also when the default cell (the store given) is the one down: a cell's failover fails
// its own tenants' calls only, and every replica shares the cell, so a balancer draining them
// would fail every other cell's tenants too. With every cell down the server is NOT_SERVING; a
// cell the map drops turns SERVICE_UNKNOWN.
func TestServeOperations_HealthAcrossCellsNamesEachCell(t *testing.T) {
	t.Parallel()
	unreachable, _ := pgtest.Unreachable(t)
	storeOn := func(db *gorm.DB) *claim.Store {
		st, err := claim.NewStore(db, claim.Config{DigestSecret: benchSecret})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	up, down := storeOn(pgtest.New(t)), storeOn(unreachable)
	const (
		serving    = healthpb.HealthCheckResponse_SERVING
		notServing = healthpb.HealthCheckResponse_NOT_SERVING
		unknown    = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	)
	for _, tt := range []struct {
		name  string
		cells map[string]*claim.Store
		want  map[string]healthpb.HealthCheckResponse_ServingStatus
	}{
		{"cell a down", map[string]*claim.Store{"a": down, "b": up},
			map[string]healthpb.HealthCheckResponse_ServingStatus{"": serving, "test.v1.Things": serving, "cell/a": notServing, "cell/b": serving}},
		{"every cell down", map[string]*claim.Store{"a": down, "b": down},
			map[string]healthpb.HealthCheckResponse_ServingStatus{"": notServing, "test.v1.Things": notServing, "cell/a": notServing, "cell/b": notServing}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := grpc.NewServer()
			srv.RegisterService(&grpc.ServiceDesc{ServiceName: "test.v1.Things", HandlerType: (*any)(nil)}, struct{}{})
			cells := make(chan map[string]*claim.Store, 1)
			cells <- tt.cells
			current := tt.cells
			stop := grpcidem.ServeOperations(srv, down, grpcidem.HealthConfig{Every: 20 * time.Millisecond, Cells: func() map[string]*claim.Store {
				select {
				case current = <-cells: // the map changed
				default:
				}
				return current
			}})
			defer stop()
			hc := serveHealth(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for svc, want := range tt.want { // the first check ran before ServeOperations returned
				if h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || h.Status != want {
					t.Errorf("health of %q: %v %v; want %s", svc, h, err, want)
				}
			}
			// The map drops cell a: its status turns SERVICE_UNKNOWN at the next check.
			cells <- map[string]*claim.Store{"b": tt.cells["b"]}
			w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "cell/a"})
			if err != nil {
				t.Fatal(err)
			}
			for {
				h, err := w.Recv()
				if err != nil {
					t.Fatalf("watching cell/a after the map dropped it: %v", err)
				}
				if h.Status == unknown {
					break
				}
			}
		})
	}
}

// serveHealth serves srv on a loopback port until t ends and returns a health client of it.
func serveHealth(t *testing.T, srv *grpc.Server) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}
