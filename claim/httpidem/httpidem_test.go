package httpidem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	pgtest.Main(m)
}

// chargeOp is a downstream in memory. While gate is set, a charge waits for it to close (the
// test holds a request in progress).
type chargeOp struct {
	executes atomic.Int64
	gate     chan struct{}
}

func (o *chargeOp) Name() string { return "payment.charge" }
func (o *chargeOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{Ignore: []string{"description", "client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"}
}
func (o *chargeOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	n := o.executes.Add(1)
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &claim.Document{ResourceID: fmt.Sprintf("pay_%d", n)}, nil
}
func (o *chargeOp) Lookup(context.Context, *claim.Lease) (*claim.Document, error) { return nil, nil }
func (o *chargeOp) Apply(_ context.Context, _ *gorm.DB, l *claim.Lease, d *claim.Document) (*claim.Snapshot, error) {
	body := fmt.Sprintf(`{"payment_id":%q,"status":"succeeded","amount_minor":%d}`, d.ResourceID, *l.Amount)
	return &claim.Snapshot{Status: 201, Body: []byte(body), ResourceID: d.ResourceID,
		Headers: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/" + d.ResourceID}}, nil
}

type world struct {
	t      *testing.T
	srv    *httptest.Server
	op     *chargeOp
	store  *claim.Store
	db     *gorm.DB
	status atomic.Value // the "resource" status the Middleware route reports
}

// flavors are the two front ends of the one core: the gin adapters and plain net/http.
var flavors = []string{"gin", "net/http"}

// newWorld serves /charge (Handler) and /orders (Middleware) with bearer-token tenants, on gin.
func newWorld(t *testing.T) *world {
	t.Parallel()
	return newWorldOn(t, "gin")
}

// holdCharges makes every charge wait until release is called, so a request stays in progress.
func (w *world) holdCharges() (release func()) {
	w.op.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(w.op.gate) })
}

// awaitProcessing waits until a request holds a key (its claim committed).
func (w *world) awaitProcessing() {
	w.t.Helper()
	pgtest.Await(w.t, w.db, 10*time.Second, "a request holding the key", func() bool {
		var n int64
		w.db.Raw(`SELECT count(*) FROM idempotency_keys WHERE state = 'processing'`).Scan(&n)
		return n == 1
	}, "idempotency_keys")
}

// newWorldOn is newWorld on the given flavor; the caller runs t.Parallel.
func newWorldOn(t *testing.T, flavor string) *world {
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret")})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, op: &chargeOp{}, store: store, db: db}
	w.status.Store("created")
	tokens := map[string]string{"tok-a": "tenant-a", "tok-b": "tenant-b"}
	tenant := func(r *http.Request) (string, error) {
		t, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			return "", errors.New("unknown token")
		}
		return t, nil
	}
	live := func(ctx context.Context) ([]claim.ExpiryPolicy, error) { return retention.ExpiryPolicies(ctx, db) }
	if flavor == "net/http" {
		cfg := httpidem.Config{Store: store, Service: "test", MaxBodyBytes: 4096, TenantFromRequest: tenant, Retention: live}
		mux := http.NewServeMux()
		mux.Handle("GET /idempotency/status", httpidem.StatusHandler(cfg))
		mux.Handle("GET /idempotency/policy", httpidem.PolicyHandler(cfg, "payment.charge"))
		mux.Handle("POST /charge", httpidem.OperationHandler(cfg, w.op))
		mux.Handle("POST /orders", httpidem.Wrap(cfg, httpidem.Route{Operation: "order.create"})(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Set-Cookie", "session=secret")
			rw.Header().Set("Content-Type", "application/json; charset=utf-8")
			rw.WriteHeader(201)
			_ = json.NewEncoder(rw).Encode(map[string]any{"order_id": "o1", "status": w.status.Load()})
		})))
		w.srv = httptest.NewServer(mux)
		t.Cleanup(w.srv.Close)
		return w
	}
	cfg := httpidem.Config{Store: store, Service: "test", MaxBodyBytes: 4096, Retention: live,
		Tenant: func(c *gin.Context) (string, error) { return tenant(c.Request) }}
	r := gin.New()
	r.GET("/idempotency/status", httpidem.Status(cfg))
	r.GET("/idempotency/policy", httpidem.Policy(cfg, "payment.charge"))
	r.POST("/charge", httpidem.Handler(cfg, w.op))
	r.POST("/orders", httpidem.Middleware(cfg, httpidem.Route{Operation: "order.create"}), func(c *gin.Context) {
		c.Header("Set-Cookie", "session=secret")
		c.JSON(201, gin.H{"order_id": "o1", "status": w.status.Load()})
	})
	w.srv = httptest.NewServer(r) // listens on 127.0.0.1
	t.Cleanup(w.srv.Close)
	return w
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (w *world) post(path, token string, keys []string, body string) resp {
	w.t.Helper()
	return w.do("POST", path, token, keys, body)
}

func (w *world) do(method, path, token string, keys []string, body string) resp {
	w.t.Helper()
	req, _ := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, k := range keys {
		req.Header.Add(httpidem.HeaderKey, k)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

func problemType(t *testing.T, r resp) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q for %d %s", ct, r.status, r.body)
	}
	var p httpidem.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(p.Type, "/problems/")
}

const pay = `{"amount_minor": 1234, "currency": "CNY", "merchant_order_no": "m1", "payee": "acme", "description": "x", "client_ts": "t1"}`

func TestConformance(t *testing.T) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			testConformance(t, newWorldOn(t, flavor))
		})
	}
}

func testConformance(t *testing.T, w *world) {
	cases := []struct {
		name        string
		token       string
		keys        []string
		body        string
		wantStatus  int
		wantProblem string
		replayed    bool
	}{
		{"no credential", "", []string{"k1"}, pay, 401, "unauthenticated", false},
		{"missing key", "tok-a", nil, pay, 400, "key-missing", false},
		{"key too long", "tok-a", []string{strings.Repeat("k", 256)}, pay, 400, "key-malformed", false},
		{"key not ASCII", "tok-a", []string{"clé"}, pay, 400, "key-malformed", false},
		{"two key headers", "tok-a", []string{"a", "b"}, pay, 400, "key-malformed", false},
		{"body not JSON", "tok-a", []string{"k-json"}, `amount=1`, 400, "invalid-request", false},
		{"body too large", "tok-a", []string{"k-big"}, `{"x":"` + strings.Repeat("a", 5000) + `"}`, 413, "body-too-large", false},
		{"first request", "tok-a", []string{"k1"}, pay, 201, "", false},
		{"retry replays", "tok-a", []string{"k1"}, pay, 201, "", true},
		{"structured-header form is the same key", "tok-a", []string{`"k1"`}, pay, 201, "", true},
		{"retry with only non-intent changes replays", "tok-a", []string{"k1"}, strings.Replace(pay, `"t1"`, `"t2"`, 1), 201, "", true},
		{"same key other payload", "tok-a", []string{"k1"}, strings.Replace(pay, "1234", "1235", 1), 422, "key-reused", false},
		{"same key other tenant is another key", "tok-b", []string{"k1"}, pay, 201, "", false},
	}
	var first string
	for _, c := range cases {
		r := w.post("/charge", c.token, c.keys, c.body)
		if r.status != c.wantStatus {
			t.Fatalf("%s: status %d, want %d (%s)", c.name, r.status, c.wantStatus, r.body)
		}
		if c.wantProblem != "" {
			if got := problemType(t, r); got != c.wantProblem {
				t.Fatalf("%s: problem %q, want %q", c.name, got, c.wantProblem)
			}
		}
		if got := r.header.Get(httpidem.HeaderReplayed) == "true"; got != c.replayed {
			t.Fatalf("%s: replayed header %v, want %v", c.name, got, c.replayed)
		}
		if c.name == "first request" {
			first = r.body
			if r.header.Get("Location") == "" {
				t.Fatalf("Location header missing")
			}
		}
		if c.replayed && r.body != first {
			t.Fatalf("%s: replayed body %s != first %s", c.name, r.body, first)
		}
	}
	if n := w.op.executes.Load(); n != 2 {
		t.Fatalf("executes = %d, want 2 (one per tenant)", n)
	}
}

func TestInProgressAnswers409WithRetryAfter(t *testing.T) {
	w := newWorld(t)
	release := w.holdCharges()
	defer release()
	done := make(chan resp)
	go func() { done <- w.post("/charge", "tok-a", []string{"slow"}, pay) }()
	w.awaitProcessing()
	r := w.post("/charge", "tok-a", []string{"slow"}, pay)
	if r.status != 409 || problemType(t, r) != "request-in-progress" || r.header.Get("Retry-After") == "" {
		t.Fatalf("want 409 with problem type and Retry-After: %d %v %s", r.status, r.header, r.body)
	}
	release()
	if r := <-done; r.status != 201 {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
}

func TestParallelIdenticalRequestsExecuteOnce(t *testing.T) {
	w := newWorld(t)
	release := w.holdCharges()
	defer release()
	const n = 50
	statuses := make(chan int, n)
	for range n {
		go func() { statuses <- w.post("/charge", "tok-a", []string{"par"}, pay).status }()
	}
	// One of them holds the key and charges; every other is answered while it does.
	for range n - 1 {
		if s := <-statuses; s != 409 {
			t.Fatalf("status %d while the first request charges, want 409", s)
		}
	}
	release()
	if s := <-statuses; s != 201 {
		t.Fatalf("the charging request: %d, want 201", s)
	}
	if n := w.op.executes.Load(); n != 1 {
		t.Fatalf("executes = %d", n)
	}
}

func TestMiddleware_ReplayReturnsCreationTimeResponseEvenAfterTheResourceChanged(t *testing.T) {
	eachFlavor(t, func(t *testing.T, flavor string) {
		w := newWorldOn(t, flavor)
		first := w.post("/orders", "tok-a", []string{"o-1"}, `{"sku":"x","qty":1}`)
		if first.status != 201 || first.header.Get("Set-Cookie") == "" {
			t.Fatalf("%+v", first)
		}
		w.status.Store("shipped")
		again := w.post("/orders", "tok-a", []string{"o-1"}, `{"qty":1,"sku":"x"}`)
		if again.status != 201 || again.body != first.body || again.header.Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("replay %+v, first %+v", again, first)
		}
		if again.header.Get("Set-Cookie") != "" {
			t.Fatal("Set-Cookie replayed")
		}
		if strings.Contains(again.body, "shipped") {
			t.Fatal("replay shows the current state instead of the creation-time response")
		}
	})
}

func TestExpiredResultAnswers410WithoutExecuting(t *testing.T) {
	eachFlavor(t, func(t *testing.T, flavor string) {
		w := newWorldOn(t, flavor)
		if r := w.post("/charge", "tok-a", []string{"old"}, pay); r.status != 201 {
			t.Fatal(r)
		}
		pgtest.Exec(t, w.db, `UPDATE idempotency_keys SET response_day = NULL, response_expires_at = now() - interval '1 s'`)
		r := w.post("/charge", "tok-a", []string{"old"}, pay)
		if r.status != 410 || problemType(t, r) != "result-expired" || !strings.Contains(r.body, "pay_1") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if w.op.executes.Load() != 1 {
			t.Fatal("expired key executed again")
		}
	})
}
