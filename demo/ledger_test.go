package demo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
)

// The ledger sender posts under the reference header and looks an entry up by it: 200 found,
// 404 not found; a 4xx post is permanent, a 5xx one worth retrying.
func TestLedgerSender_PostsAndLooksUpByReference(t *testing.T) {
	var mu sync.Mutex
	booked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/entries":
			ref := r.Header.Get(demo.LedgerHeaderKey)
			switch ref {
			case "bad":
				w.WriteHeader(http.StatusBadRequest)
			case "down":
				w.WriteHeader(http.StatusServiceUnavailable)
			default:
				booked[ref]++
				w.WriteHeader(http.StatusCreated)
			}
		case r.Method == http.MethodGet && booked[r.URL.Path[len("/entries/"):]] > 0:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	s := demo.LedgerSender{URL: srv.URL}
	ctx := context.Background()
	if found, err := s.Lookup(ctx, "ref-1"); err != nil || found {
		t.Fatalf("before the post: found %v, %v", found, err)
	}
	if err := s.Send(ctx, "ref-1", []byte(`{"payment_id":"p1"}`)); err != nil {
		t.Fatal(err)
	}
	if found, err := s.Lookup(ctx, "ref-1"); err != nil || !found || booked["ref-1"] != 1 {
		t.Fatalf("after the post: found %v, %v, booked %d", found, err, booked["ref-1"])
	}
	if err := s.Send(ctx, "bad", nil); !errors.Is(err, daemon.ErrPermanent) {
		t.Fatalf("a 400: %v, want permanent", err)
	}
	if err := s.Send(ctx, "down", nil); err == nil || errors.Is(err, daemon.ErrPermanent) {
		t.Fatalf("a 503: %v, want a retryable error", err)
	}
}
