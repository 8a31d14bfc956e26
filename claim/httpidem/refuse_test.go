package httpidem_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim/httpidem"
)

// A Middleware handler that refuses after the claim releases it: problem+json naming the field,
// no replay, and the same key with a corrected body executes (then replays).
func TestRefuseRequest_ReleasesTheClaim(t *testing.T) {
	eachFlavor(t, testRefuseRequest)
}

func testRefuseRequest(t *testing.T, flavor string) {
	w := newWorldOn(t, flavor)
	var calls atomic.Int64
	route := httpidem.Route{Operation: "transfer.create"}
	amount := func(body io.Reader) int64 {
		calls.Add(1)
		var b struct {
			Amount int64 `json:"amount"`
		}
		if err := json.NewDecoder(body).Decode(&b); err != nil {
			return 0
		}
		return b.Amount
	}
	var srv *httptest.Server
	if flavor == "net/http" {
		cfg := httpidem.Config{Store: w.store, Service: "test", TenantFromRequest: func(*http.Request) (string, error) { return "tenant-a", nil }}
		srv = httptest.NewServer(httpidem.Wrap(cfg, route)(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			n := amount(r.Body)
			if n <= 0 {
				httpidem.RefuseHTTP(rw, r, httpidem.Refuse("amount", "must be positive"))
				return
			}
			rw.WriteHeader(201)
			_, _ = fmt.Fprintf(rw, `{"transfer_id":"t1","amount":%d}`, n)
		})))
	} else {
		cfg := httpidem.Config{Store: w.store, Service: "test", Tenant: func(*gin.Context) (string, error) { return "tenant-a", nil }}
		r := gin.New()
		r.POST("/transfers", httpidem.Middleware(cfg, route), func(c *gin.Context) {
			n := amount(c.Request.Body)
			if n <= 0 {
				httpidem.RefuseRequest(c, httpidem.Refuse("amount", "must be positive"))
				return
			}
			c.JSON(201, gin.H{"transfer_id": "t1", "amount": n})
		})
		srv = httptest.NewServer(r)
	}
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
