package grpcidem_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// A store that cannot be reached answers Unavailable STORE_UNAVAILABLE with a retry delay (the
// client interceptor retries it with the same key), not Internal; the handler never runs.
func TestStoreUnreachable_IsUnavailableWithRetryInfo(t *testing.T) {
	db, addr := pgtest.Unreachable(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: benchSecret, ReconnectWindow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	idem, err := grpcidem.NewServerInterceptor(grpcidem.Config{Store: store, Service: "test",
		Tenant:  func(context.Context) (string, error) { return "tenant-a", nil },
		Methods: map[string]grpcidem.Method{benchOurs: {Operation: "payment.charge", Response: func() any { return new(chargeReply) }}}})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := benchHandlers{ours: func(context.Context, *chargeReq) (*chargeReply, error) { ran = true; return &chargeReply{}, nil }}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem))
	srv.RegisterService(&benchDesc, h)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(gl) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidem.MetadataKey, "k-unreachable")
	err = cc.Invoke(ctx, benchOurs, &chargeReq{AmountMinor: 100, Currency: "CNY"}, new(chargeReply))
	if status.Code(err) != codes.Unavailable || grpcidem.Reason(err) != grpcidem.ReasonStoreUnavailable || grpcidem.RetryDelay(err) <= 0 {
		t.Fatalf("got %v (reason %q, retry delay %v), want Unavailable STORE_UNAVAILABLE with a retry delay", err, grpcidem.Reason(err), grpcidem.RetryDelay(err))
	}
	if strings.Contains(err.Error(), addr) {
		t.Errorf("the status names the database's address: %v", err)
	}
	if ran {
		t.Error("the handler ran without a claim")
	}
}
