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
}

// ServeOperations registers on srv, after its services, what operators' tools expect of a gRPC
// server: server reflection (grpc.reflection.v1 and v1alpha, what grpcurl and grpcui ask; a
// service's messages are described from the proto registry, so register its file descriptor
// there) and the standard grpc.health.v1.Health service. Health follows the idempotency store:
// the server ("") and each of its services are SERVING while a ping of the store's database
// answers within the timeout, NOT_SERVING otherwise — a keyed call cannot be answered without
// the store. Call stop before stopping srv: every status turns NOT_SERVING, so load balancers
// drain the server while it finishes its calls.
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
	check := func(ctx context.Context) {
		st := healthpb.HealthCheckResponse_SERVING
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		if sqlDB, err := store.DB().DB(); err != nil || sqlDB.PingContext(ctx) != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		set(st)
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
