package paysim_test

import (
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
)

// clock is a settable fake clock for byte-stable statements.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(s string) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// start runs a paysim server on 127.0.0.1 and returns it with a client.
func start(t *testing.T, cfg paysim.Config) (*paysim.Server, *paysim.Client) {
	t.Helper()
	srv, err := paysim.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return srv, paysim.NewClient(ts.URL, ts.Client())
}

func charge(amount int64, currency, order, payee, desc string) paysim.ChargeRequest {
	return paysim.ChargeRequest{AmountMinor: amount, Currency: currency, MerchantOrderNo: order, Payee: payee, Description: desc}
}

func itoa(n int) string { return strconv.Itoa(n) }
