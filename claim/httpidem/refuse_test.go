package httpidem_test

import (
	"encoding/json"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim/httpidem"
)

// A Middleware handler that refuses after the claim releases it: problem+json naming the field,
// no replay, and the same key with a corrected body executes (then replays).
func TestRefuseRequest_ReleasesTheClaim(t *testing.T) {
	w := newWorld(t, 0)
	var calls atomic.Int64
	cfg := httpidem.Config{Store: w.store, Service: "test", Tenant: func(*gin.Context) (string, error) { return "tenant-a", nil }}
	r := gin.New()
	r.POST("/transfers", httpidem.Middleware(cfg, httpidem.Route{Operation: "transfer.create"}), func(c *gin.Context) {
		calls.Add(1)
		var b struct {
			Amount int64 `json:"amount"`
		}
		if err := c.ShouldBindJSON(&b); err != nil || b.Amount <= 0 {
			httpidem.RefuseRequest(c, httpidem.Refuse("amount", "must be positive"))
			return
		}
		c.JSON(201, gin.H{"transfer_id": "t1", "amount": b.Amount})
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	w.srv = srv

	for i := 0; i < 2; i++ {
		res := w.post("/transfers", "tok-a", []string{"k-refuse"}, `{"amount":-5}`)
		var p map[string]any
		_ = json.Unmarshal([]byte(res.body), &p)
		if res.status != 400 || res.header.Get("Content-Type") != "application/problem+json" ||
			p["type"] != "/problems/invalid-field" || p["field"] != "amount" || res.header.Get(httpidem.HeaderReplayed) != "" {
			t.Fatalf("refusal %d: %+v", i, res)
		}
	}
	ok := w.post("/transfers", "tok-a", []string{"k-refuse"}, `{"amount":7}`)
	if ok.status != 201 || ok.header.Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("corrected body: %+v", ok)
	}
	again := w.post("/transfers", "tok-a", []string{"k-refuse"}, `{"amount":7}`)
	if again.status != 201 || again.header.Get(httpidem.HeaderReplayed) != "true" {
		t.Fatalf("retry of the corrected body: %+v", again)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}
