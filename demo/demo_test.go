package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	pgtest.Main(m)
}

type env struct {
	t     *testing.T
	w     *demo.World
	store *claim.Store
	key   string
	db    *gorm.DB
}

func start(t *testing.T, sim paysim.Config) *env {
	t.Helper()
	t.Parallel()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(context.Background(), demo.WorldConfig{DB: db, Store: store, Paysim: sim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return &env{t: t, w: w, store: store, key: w.APIKey("acme"), db: db}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func (e *env) pay(key string, body string, headers ...string) reply {
	e.t.Helper()
	return e.post("/v1/payments", body, e.key, append([]string{"Idempotency-Key", key}, headers...)...)
}

const body = `{"amount_minor": 1234, "currency": "CNY", "merchant_order_no": "ord-1", "payee": "alice", "description": "book", "client_ts": "2026-12-02T10:00:00Z"}`

func TestPayments_CreateReplayMismatch(t *testing.T) {
	e := start(t, paysim.Config{Seed: 1})
	first := e.pay("pay-1", body)
	if first.status != 201 || first.body["status"] != "succeeded" || first.body["amount_minor"] != float64(1234) {
		t.Fatalf("%+v", first)
	}
	again := e.pay("pay-1", strings.Replace(body, "2026-12-02T10:00:00Z", "2026-12-02T10:00:05Z", 1))
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || again.body["payment_id"] != first.body["payment_id"] {
		t.Fatalf("replay %+v", again)
	}
	if r := e.pay("pay-1", strings.Replace(body, "1234", "1300", 1)); r.status != 422 {
		t.Fatalf("changed amount: %+v", r)
	}
	dk := claim.DownstreamKey("acme", "payment.charge", "pay-1")
	if n := e.w.Paysim.ChargeCount(dk); n != 1 {
		t.Fatalf("%d charges at paysim", n)
	}
	// The payment is readable by its tenant only.
	get := func(apiKey string) int {
		req, _ := http.NewRequest("GET", e.w.APIURL+"/v1/payments/"+first.body["payment_id"].(string), nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := get(e.key); s != 200 {
		t.Fatalf("own payment: %d", s)
	}
	if s := get(e.w.APIKey("globex")); s != 404 {
		t.Fatalf("another tenant's payment: %d", s)
	}
}

func TestPayments_ParallelIdenticalRequestsChargeOnce(t *testing.T) {
	e := start(t, paysim.Config{Seed: 2, Latency: 50 * time.Millisecond})
	var wg sync.WaitGroup
	statuses := make(chan int, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- e.pay("par-1", body).status
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 201 && s != 409 {
			t.Fatalf("status %d", s)
		}
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", "payment.charge", "par-1")); n != 1 {
		t.Fatalf("%d charges at paysim", n)
	}
}

func TestPayments_DroppedResponseIsRecoveredOnRetryWithoutASecondCharge(t *testing.T) {
	e := start(t, paysim.Config{Seed: 3})
	first := e.pay("drop-1", body, "X-Paysim-Fault", "drop-response")
	if first.status != 503 {
		t.Fatalf("dropped response: %+v", first)
	}
	again := e.pay("drop-1", body)
	if again.status != 201 || again.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("retry must recover from the channel: %+v", again)
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", "payment.charge", "drop-1")); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

func TestPayments_CrashBetweenChannelAndCommitLeavesAProcessingKey(t *testing.T) {
	e := start(t, paysim.Config{Seed: 4})
	r := e.pay("crash-1", body, "X-Demo-Crash", "after-charge")
	if r.status != 500 {
		t.Fatalf("%+v", r)
	}
	out, err := e.store.Claim(context.Background(), claim.Request{Tenant: "acme", Operation: "payment.charge", Key: "crash-1",
		Intent: []byte(body), Spec: e.w.Charge.Intent()})
	if err != nil || out.Kind != claim.InProgress {
		t.Fatalf("the crashed key must stay in progress until its lease lapses: %+v %v", out, err)
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", "payment.charge", "crash-1")); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

func TestTraffic_ProducesEveryScenario(t *testing.T) {
	e := start(t, paysim.Config{Seed: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stats := &demo.TrafficStats{}
	keys := make([]string, 0, len(e.w.APIKeys))
	for k := range e.w.APIKeys {
		keys = append(keys, k)
	}
	demo.RunTraffic(ctx, demo.TrafficConfig{APIURL: e.w.APIURL, APIKeys: keys, PerSecond: 40, Seed: 7,
		Retry: 0.2, Duplicate: 0.2, Mismatch: 0.2, Crash: 0.1, Drop: 0.2}, stats)
	got := stats.Snapshot()
	for _, want := range []string{"first 201", "retry 201", "mismatch 422", "crash 500", "drop 503", "drop-retry 201"} {
		if got[want] == 0 {
			t.Errorf("no %q in %v", want, got)
		}
	}
	// The traffic pays in several currencies, and the service and paysim accept them.
	var currencies []string
	if err := e.db.Raw(`SELECT DISTINCT currency FROM payments ORDER BY 1`).Scan(&currencies).Error; err != nil {
		t.Fatal(err)
	}
	if len(currencies) < 3 {
		t.Errorf("payments in %v; want at least 3 currencies", currencies)
	}
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(got)
	t.Log(buf.String())
}

// Validation is not execution: an invalid parameter is refused before the claim (problem+json
// naming the field, nothing stored, no replay), and the same key with a corrected body charges.
// A decline is the business outcome: the key fails finally and the retry replays it.
func TestPayments_RefusalIsNotStoredButADeclineIsReplayed(t *testing.T) {
	e := start(t, paysim.Config{Seed: 3, DeclinePayees: []string{"mallory"}})
	bad := e.pay("pay-v", strings.Replace(body, "1234", "-5", 1))
	if bad.status != 400 || bad.header.Get("Content-Type") != "application/problem+json" ||
		bad.body["type"] != "/problems/invalid-field" || bad.body["field"] != "amount_minor" {
		t.Fatalf("invalid amount: %+v", bad)
	}
	again := e.pay("pay-v", strings.Replace(body, "1234", "-5", 1))
	if again.status != 400 || again.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the refusal was replayed: %+v", again)
	}
	if r := e.pay("pay-v", strings.Replace(body, `"CNY"`, `"XXY"`, 1)); r.status != 400 || r.body["field"] != "currency" {
		t.Fatalf("invalid currency: %+v", r)
	}
	ok := e.pay("pay-v", body)
	if ok.status != 201 || ok.header.Get("Idempotent-Replayed") != "" || ok.body["status"] != "succeeded" {
		t.Fatalf("corrected body under the same key: %+v", ok)
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", "payment.charge", "pay-v")); n != 1 {
		t.Fatalf("%d charges at paysim", n)
	}

	declined := strings.Replace(body, `"alice"`, `"mallory"`, 1)
	d1 := e.pay("pay-d", declined)
	if d1.status != 402 || d1.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("decline: %+v", d1)
	}
	d2 := e.pay("pay-d", declined)
	if d2.status != 402 || d2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("decline retry is not replayed: %+v", d2)
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", "payment.charge", "pay-d")); n != 1 {
		t.Fatalf("%d declined charges at paysim", n)
	}
}

// TestPayments_HostileInputIs400NamingTheField: a NUL byte or bytes that are not UTF-8 in a JSON
// field, the path or a query parameter answer 400 invalid-field naming it (never a 500 from
// PostgreSQL), nothing is stored under the key, and a body past the limit is 413.
func TestPayments_HostileInputIs400NamingTheField(t *testing.T) {
	e := start(t, paysim.Config{Seed: 4})
	for _, tc := range []struct{ body, field string }{
		{strings.Replace(body, `"alice"`, `"al\u0000ice"`, 1), "payee"},
		{strings.Replace(body, `"book"`, "\"bo\xffok\"", 1), "description"},
		{strings.Replace(body, `"ord-1"`, `"\udc00"`, 1), "merchant_order_no"},
	} {
		r := e.pay("pay-h", tc.body)
		if r.status != 400 || r.body["type"] != "/problems/invalid-field" || r.body["field"] != tc.field {
			t.Errorf("%s: %+v; want 400 invalid-field naming %s", tc.field, r, tc.field)
		}
	}
	if r := e.pay("pay-h", body); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the corrected body under the same key: %+v", r)
	}
	if r := e.pay("pay-big", `{"payee":"`+strings.Repeat("x", 20<<10)+`"}`); r.status != 413 {
		t.Errorf("a 20 KiB body: %+v; want 413", r)
	}
	for path, field := range map[string]string{"/v1/payments/pay_%00x": "path", "/v1/payments/pay_1?q=%ff": "q"} {
		req, _ := http.NewRequest("GET", e.w.APIURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		_ = json.NewDecoder(res.Body).Decode(&p)
		res.Body.Close()
		if res.StatusCode != 400 || p["field"] != field {
			t.Errorf("GET %s: %d %v; want 400 naming %s", path, res.StatusCode, p, field)
		}
	}
}
