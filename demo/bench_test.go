package demo_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// BenchmarkCallbacks measures callbacks handled per second through the demo's callback
// endpoint: signature check, one guarded transition, the outcome row and, for paid and
// refunded, the version-guarded balance update. The mix per order is the channel's bad day:
// succeeded, succeeded again (a duplicate), a late closed (ignored) and refunded — four
// callbacks, two of which change the order. IDEMOPS_BENCH_ORDERS sets the order count
// (default 500), 4 concurrent senders.
func BenchmarkCallbacks(b *testing.B) {
	orders := 500
	if v, err := strconv.Atoi(os.Getenv("IDEMOPS_BENCH_ORDERS")); err == nil && v > 0 {
		orders = v
	}
	db := pgtest.New(b)
	secret := []byte("bench-secret")
	srv := httptest.NewServer(&demo.CallbackHandler{Orders: &demo.Orders{DB: db}, Secret: secret})
	defer srv.Close()
	for b.Loop() {
		b.StopTimer()
		pgtest.Exec(b, db, `TRUNCATE demo_orders, demo_order_transitions, demo_balances`)
		pgtest.Exec(b, db, `INSERT INTO demo_orders (merchant_order_no, tenant, payment_id, amount_minor, currency, status)
			SELECT 'bo-' || g, 'acme', 'bp-' || g, 100, 'CNY', 'pending' FROM generate_series(1, ?) g`, orders)
		var jobs []paysim.CallbackEvent
		for _, typ := range []string{paysim.EventSucceeded, paysim.EventSucceeded, paysim.EventClosed, paysim.EventRefunded} {
			for i := 1; i <= orders; i++ {
				jobs = append(jobs, paysim.CallbackEvent{ID: fmt.Sprintf("evt-%s-%d-%d", typ, i, len(jobs)), Type: typ,
					MerchantOrderNo: fmt.Sprintf("bo-%d", i), AmountMinor: 100, Currency: "CNY"})
			}
		}
		b.StartTimer()
		start := time.Now()
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(len(jobs)) {
						return
					}
					body, _ := json.Marshal(jobs[i])
					req, _ := http.NewRequest("POST", srv.URL+demo.CallbackPath, bytes.NewReader(body))
					req.Header.Set(paysim.HeaderSignature, paysim.Sign(secret, body, time.Now()))
					res, err := http.DefaultClient.Do(req)
					if err != nil || res.StatusCode != 200 {
						failed.Add(1)
					}
					if res != nil {
						res.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		if failed.Load() != 0 {
			b.Fatalf("%d callbacks not acknowledged", failed.Load())
		}
		var refunded int64
		db.Raw(`SELECT count(*) FROM demo_orders WHERE status = 'refunded'`).Scan(&refunded)
		if refunded != int64(orders) {
			b.Fatalf("%d orders refunded, want %d", refunded, orders)
		}
		b.ReportMetric(float64(len(jobs))/elapsed.Seconds(), "callbacks/s")
		b.StartTimer()
	}
}
