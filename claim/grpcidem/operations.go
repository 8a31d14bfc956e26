package grpcidem

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/idemops/idemops/claim"
)

// HealthConfig tunes ServeOperations' health checks. Zero fields take the defaults.
type HealthConfig struct {
	// Every is how often the store is pinged (default 5 s).
	Every time.Duration
	// Timeout bounds one ping (default 2 s).
	Timeout time.Duration
	// Cells, in a deployment of tenant cells (docs/SCALING.md), are every cell's store by cell
	// name, asked at each check (the map may add cells); nil: one database, the store's. Each
	// cell is reported as CellHealthService(name), and the server ("") and its services are
	// SERVING while any cell answers: a cell that is down fails only its own tenants' calls, and
	// every replica shares it, so draining the replicas would take every other cell's tenants
	// down with it.
	Cells func() map[string]*claim.Store
}

// CellHealthService is the grpc.health.v1 service name under which ServeOperations reports
// the cell called name: "cell/NAME".
func CellHealthService(name string) string { return "cell/" + name }

// ServeOperations registers on srv, after its services, what operators' tools expect of a gRPC
// server: server reflection (grpc.reflection.v1 and v1alpha, what grpcurl and grpcui ask; a
// service's messages are described from the proto registry, so register its file descriptor
// there) and the standard grpc.health.v1.Health service. Health follows the idempotency store:
// the server ("") and each of its services are SERVING while a ping of the store's database
// answers within the timeout, NOT_SERVING otherwise — a keyed call cannot be answered without
// the store. With cfg.Cells, each cell has a status of its own ("cell/NAME") and the server's
// follows them all (SERVING while any answers); a cell the map no longer names turns
// SERVICE_UNKNOWN. Call stop before stopping srv: every status turns NOT_SERVING, so load
// balancers drain the server while it finishes its calls.
func ServeOperations(srv *grpc.Server, store *claim.Store, cfg HealthConfig) (stop func()) {
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	h := health.NewServer()
	var names []string
	for name := range srv.GetServiceInfo() {
		names = append(names, name)
	}
	healthpb.RegisterHealthServer(srv, h)
	reflection.Register(srv)

	set := func(st healthpb.HealthCheckResponse_ServingStatus) {
		h.SetServingStatus("", st)
		for _, n := range names {
			h.SetServingStatus(n, st)
		}
	}
	var cellsSeen map[string]bool // the cells the last check reported (the checks run one at a time)
	check := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		if cfg.Cells == nil {
			set(servingIf(pings(ctx, store)))
			return
		}
		stores := cfg.Cells()
		up := make(map[string]bool, len(stores))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, st := range stores { // at once: a cell that hangs costs the timeout once
			wg.Go(func() {
				ok := pings(ctx, st)
				mu.Lock()
				defer mu.Unlock()
				up[name] = ok
			})
		}
		wg.Wait()
		anyUp := false
		for name, ok := range up {
			h.SetServingStatus(CellHealthService(name), servingIf(ok))
			anyUp = anyUp || ok
		}
		for name := range cellsSeen {
			if _, still := up[name]; !still {
				h.SetServingStatus(CellHealthService(name), healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
			}
		}
		cellsSeen = up
		set(servingIf(anyUp))
	}
	ctx, cancel := context.WithCancel(context.Background())
	check(ctx) // known before the first call arrives
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(cfg.Every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				check(ctx)
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			h.Shutdown()
		})
	}
}

// pings reports whether store's database answers a ping within ctx.
func pings(ctx context.Context, store *claim.Store) bool {
	sqlDB, err := store.DB().DB()
	return err == nil && sqlDB.PingContext(ctx) == nil
}

// servingIf is SERVING when ok, NOT_SERVING otherwise.
func servingIf(ok bool) healthpb.HealthCheckResponse_ServingStatus {
	if ok {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}
