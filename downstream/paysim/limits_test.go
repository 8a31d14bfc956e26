package paysim_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemops/idemops/downstream/paysim"
)

// TestBodyLimit_413: every body the simulator reads is limited, and past the limit the answer
// is 413, not a 400 about a malformed body.
func TestBodyLimit_413(t *testing.T) {
	t.Parallel()
	srv, _ := start(t, paysim.Config{})
	big := `{"description":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, path := range []string{"/charges", "/charges/k/refunds", "/notifications", "/_paysim/charges"} {
		req := httptest.NewRequest("POST", path, strings.NewReader(big))
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s: %d %.200s; want 413", path, rec.Code, rec.Body.String())
		}
	}
	req := httptest.NewRequest("PATCH", "/_paysim/charges/ch_1", strings.NewReader(big))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("PATCH: %d; want 413", rec.Code)
	}
}
