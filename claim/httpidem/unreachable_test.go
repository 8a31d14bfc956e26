package httpidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// A store that cannot be reached (a failover in progress) answers 503 store-unavailable with
// Retry-After, so the client comes back with the same key — not a 500, and the handler never runs.
func TestStoreUnreachable_Answers503WithRetryAfter(t *testing.T) {
	t.Parallel()
	db, addr := pgtest.Unreachable(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret"), ReconnectWindow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	cfg := httpidem.Config{Store: store, Service: "test", MaxBodyBytes: 4096,
		TenantFromRequest: func(*http.Request) (string, error) { return "tenant-a", nil }}
	srv := httptest.NewServer(httpidem.Wrap(cfg, httpidem.Route{Operation: "order.create"})(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ran = true
		rw.WriteHeader(201)
	})))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(pay))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpidem.HeaderKey, "k-unreachable")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body strings.Builder
	_, _ = io.Copy(&body, res.Body)
	r := resp{res.StatusCode, res.Header, body.String()}
	if r.status != http.StatusServiceUnavailable || problemType(t, r) != "store-unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s (Retry-After %q), want 503 store-unavailable with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if strings.Contains(r.body, addr) {
		t.Errorf("the answer names the database's address: %s", r.body)
	}
	if ran {
		t.Error("the handler ran without a claim")
	}
}
