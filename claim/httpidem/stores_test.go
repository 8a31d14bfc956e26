package httpidem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim/claimtest"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/internal/testinfra/syncbuf"
)

// cellsWorld serves /charge, /orders and the status lookup with Stores routing tenant-a to one
// database and tenant-b to another; tenant-c authenticates but has no store.
type cellsWorld struct {
	srv      *httptest.Server
	dbA, dbB *gorm.DB
	unrouted claimtest.Counter
	log      syncbuf.Buffer
}

func newCellsWorld(t *testing.T) *cellsWorld {
	t.Helper()
	t.Parallel()
	cw := &cellsWorld{dbA: pgtest.New(t), dbB: pgtest.New(t)}
	stores := claimtest.Open(t, []byte("0123456789abcdef-secret"), map[string]*gorm.DB{"tenant-a": cw.dbA, "tenant-b": cw.dbB})
	cfg := httpidem.Config{
		Store: stores["tenant-a"], Service: "test",
		Stores:   stores.Of,
		Unrouted: &cw.unrouted,
		Logger:   slog.New(slog.NewTextHandler(&cw.log, nil)),
		TenantFromRequest: func(r *http.Request) (string, error) {
			if t := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); t != "" {
				return t, nil
			}
			return "", errors.New("no token")
		},
	}
	mux := http.NewServeMux()
	mux.Handle("GET /idempotency/status", httpidem.StatusHandler(cfg))
	mux.Handle("POST /charge", httpidem.OperationHandler(cfg, &chargeOp{}))
	mux.Handle("POST /orders", httpidem.Wrap(cfg, httpidem.Route{Operation: "order.create"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":"o1"}`))
	})))
	cw.srv = httptest.NewServer(mux)
	t.Cleanup(cw.srv.Close)
	return cw
}

func (cw *cellsWorld) do(t *testing.T, method, path, tenant, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, cw.srv.URL+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+tenant)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	return resp, doc
}

func keysOf(t *testing.T, db *gorm.DB, tenant string) int64 {
	t.Helper()
	var n int64
	if err := db.Raw(`SELECT count(*) FROM idempotency_keys WHERE tenant = ?`, tenant).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStores_EachTenantIsClaimedInItsOwnStoreOnly: with Stores, every route claims in the
// authenticated tenant's store, and the status lookup reads there.
func TestStores_EachTenantIsClaimedInItsOwnStoreOnly(t *testing.T) {
	cw := newCellsWorld(t)
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		if resp, doc := cw.do(t, "POST", "/charge", tenant, "k1", `{"amount_minor":100,"currency":"EUR"}`); resp.StatusCode != 201 {
			t.Fatalf("%s charge: %d %v", tenant, resp.StatusCode, doc)
		}
		if resp, doc := cw.do(t, "POST", "/orders", tenant, "k2", `{"sku":"x"}`); resp.StatusCode != 201 {
			t.Fatalf("%s order: %d %v", tenant, resp.StatusCode, doc)
		}
		if resp, doc := cw.do(t, "GET", "/idempotency/status?operation=payment.charge", tenant, "k1", ""); resp.StatusCode != 200 || doc["state"] != "completed" {
			t.Errorf("%s status: %d %v", tenant, resp.StatusCode, doc)
		}
	}
	for _, tc := range []struct {
		name   string
		db     *gorm.DB
		tenant string
		want   int64
	}{{"a", cw.dbA, "tenant-a", 2}, {"a", cw.dbA, "tenant-b", 0}, {"b", cw.dbB, "tenant-b", 2}, {"b", cw.dbB, "tenant-a", 0}} {
		if n := keysOf(t, tc.db, tc.tenant); n != tc.want {
			t.Errorf("store %s holds %d keys of %s, want %d", tc.name, n, tc.tenant, tc.want)
		}
	}
}

// TestStores_ATenantWithNoStoreIsRefusedNeverDefaulted: 503 tenant-unavailable, a log line and
// the counter — and no key written anywhere, Store (the default) included.
func TestStores_ATenantWithNoStoreIsRefusedNeverDefaulted(t *testing.T) {
	cw := newCellsWorld(t)
	for i, path := range []string{"/charge", "/orders", "/idempotency/status?operation=payment.charge"} {
		method := "POST"
		if strings.HasPrefix(path, "/idempotency") {
			method = "GET"
		}
		resp, doc := cw.do(t, method, path, "tenant-c", "k1", `{"amount_minor":100,"currency":"EUR"}`)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasSuffix(fmt.Sprint(doc["type"]), "tenant-unavailable") {
			t.Errorf("%s for a tenant with no store: %d %v; want 503 tenant-unavailable", path, resp.StatusCode, doc)
		}
		if got := cw.unrouted.Value(); got != int64(i+1) {
			t.Errorf("after %s: Unrouted %d, want %d", path, got, i+1)
		}
	}
	if n := keysOf(t, cw.dbA, "tenant-c") + keysOf(t, cw.dbB, "tenant-c"); n != 0 {
		t.Errorf("%d keys written for a tenant with no store", n)
	}
	if !strings.Contains(cw.log.String(), `msg="request refused: no idempotency store for the tenant" tenant=tenant-c`) {
		t.Errorf("log has no refusal line naming the tenant:\n%s", cw.log.String())
	}
}
