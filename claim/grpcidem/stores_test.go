package grpcidem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim/claimtest"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/internal/testinfra/syncbuf"
)

// TestStores_EachTenantIsClaimedInItsOwnStoreAndAnUnknownOneIsRefused: with Stores, a call is
// claimed (and completed) in its tenant's store only; a tenant with no store is answered
// Unavailable TENANT_UNAVAILABLE, logged and counted, its handler never runs and nothing is
// written anywhere.
func TestStores_EachTenantIsClaimedInItsOwnStoreAndAnUnknownOneIsRefused(t *testing.T) {
	t.Parallel()
	dbs := map[string]*gorm.DB{"tenant-a": pgtest.New(t), "tenant-b": pgtest.New(t)}
	stores := claimtest.Open(t, []byte("0123456789abcdef-secret"), dbs)
	var unrouted claimtest.Counter
	var log syncbuf.Buffer
	idem, err := grpcidem.NewServerInterceptor(grpcidem.Config{Service: "test",
		Stores:   stores.Of,
		Unrouted: &unrouted,
		Logger:   slog.New(slog.NewTextHandler(&log, nil)),
		Tenant: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("tenant"); len(v) == 1 {
				return v[0], nil
			}
			return "", errors.New("no tenant")
		},
		Methods: map[string]grpcidem.Method{chargeMethod: {Operation: "payment.charge", Response: func() any { return new(chargeReply) }}}})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	handler := func(context.Context, any) (any, error) {
		ran.Add(1)
		return &chargeReply{PaymentID: "p1", Status: "succeeded"}, nil
	}
	call := func(tenant string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("tenant", tenant, grpcidem.MetadataKey, "k1"))
		_, err := idem(ctx, &chargeReq{AmountMinor: 100, Currency: "EUR"}, &grpc.UnaryServerInfo{FullMethod: chargeMethod}, handler)
		return err
	}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		if err := call(tenant); err != nil {
			t.Fatalf("%s: %v", tenant, err)
		}
	}
	count := func(db *gorm.DB, tenant string) (n int64) {
		if err := db.Raw(`SELECT count(*) FROM idempotency_keys WHERE tenant = ? AND state = 'completed'`, tenant).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		db     string
		tenant string
		want   int64
	}{{"tenant-a", "tenant-a", 1}, {"tenant-a", "tenant-b", 0}, {"tenant-b", "tenant-b", 1}, {"tenant-b", "tenant-a", 0}} {
		if n := count(dbs[tc.db], tc.tenant); n != tc.want {
			t.Errorf("%s's store holds %d completed keys of %s, want %d", tc.db, n, tc.tenant, tc.want)
		}
	}

	err = call("tenant-c")
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(fmt.Sprint(st.Details()), grpcidem.ReasonTenantUnavailable) {
		t.Errorf("tenant with no store: %v; want Unavailable %s", err, grpcidem.ReasonTenantUnavailable)
	}
	if ran.Load() != 2 || unrouted.Value() != 1 {
		t.Errorf("handler ran %d times (want 2), Unrouted %d (want 1)", ran.Load(), unrouted.Value())
	}
	if n := count(dbs["tenant-a"], "tenant-c") + count(dbs["tenant-b"], "tenant-c"); n != 0 {
		t.Errorf("%d keys written for a tenant with no store", n)
	}
	if !strings.Contains(log.String(), "call refused: no idempotency store for the tenant") {
		t.Errorf("no refusal in the log:\n%s", log.String())
	}
}
