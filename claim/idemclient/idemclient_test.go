package idemclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// server answers the scripted statuses in order and records the key of every attempt.
func server(t *testing.T, statuses ...int) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get(HeaderKey))
		st := statuses[min(len(keys)-1, len(statuses)-1)]
		if st == http.StatusConflict {
			w.Header().Set("Retry-After", "0")
		}
		if st == http.StatusOK {
			w.Header().Set(HeaderReplayed, "true")
		}
		w.WriteHeader(st)
	}))
	t.Cleanup(srv.Close)
	return srv, &keys
}

func fast() *Client { return &Client{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond} }

func TestDo_RetriesWithOneKeyUntilFinal(t *testing.T) {
	srv, keys := server(t, 503, 409, 500, 200)
	res, err := fast().Do(context.Background(), http.MethodPost, srv.URL, "", nil, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 4 || len(*keys) != 4 || !res.Replayed || res.Response.StatusCode != 200 {
		t.Fatalf("attempts %d keys %v replayed %v", res.Attempts, *keys, res.Replayed)
	}
	for _, k := range *keys {
		if k == "" || k != res.Key {
			t.Fatalf("keys differ across retries: %v", *keys)
		}
	}
}

func TestDo_StopsOnOther4xx(t *testing.T) {
	srv, keys := server(t, 422, 200)
	res, err := fast().Do(context.Background(), http.MethodPost, srv.URL, "caller-key", nil, nil)
	if err != nil || res.Response.StatusCode != 422 || len(*keys) != 1 || (*keys)[0] != "caller-key" {
		t.Fatalf("err %v keys %v", err, *keys)
	}
}

func TestDo_AttemptsAreCapped(t *testing.T) {
	srv, keys := server(t, 503)
	c := fast()
	c.MaxAttempts = 3
	_, err := c.Do(context.Background(), http.MethodPost, srv.URL, "", nil, nil)
	if !errors.Is(err, ErrAttemptsExhausted) || len(*keys) != 3 {
		t.Fatalf("err %v attempts %d", err, len(*keys))
	}
}
