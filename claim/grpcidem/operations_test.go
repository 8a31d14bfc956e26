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
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			hc := healthpb.NewHealthClient(cc)
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
