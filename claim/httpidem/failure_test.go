package httpidem_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// failingRoutes serves /db (database-only: an order row in the route's transaction) and /ext
// (External: it "calls a channel"). Each answers 500 while fail is set, then 201.
type failingRoutes struct {
	*world
	calls atomic.Int64
	fail  atomic.Bool
	panic atomic.Bool
}

// eachFlavor runs f as a parallel subtest on gin and on net/http.
func eachFlavor(t *testing.T, f func(t *testing.T, flavor string)) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			f(t, flavor)
		})
	}
}

func newFailingRoutes(t *testing.T, flavor string) *failingRoutes {
	w := newWorldOn(t, flavor)
	pgtest.Exec(t, w.db, `CREATE TABLE shop_orders (id text PRIMARY KEY)`)
	f := &failingRoutes{world: w}
	// handle is the route's work: an order row in the route's transaction, then the answer.
	handle := func(ctx context.Context) (int, string) {
		n := f.calls.Add(1)
		if tx := httpidem.TxFrom(ctx); tx != nil {
			if err := tx.Exec(`INSERT INTO shop_orders (id) VALUES (?)`, "o-"+strings.Repeat("x", int(n))).Error; err != nil {
				return 500, `{"error":"insert"}`
			}
		}
		if f.panic.Load() {
			panic("handler bug")
		}
		if f.fail.Load() {
			return 500, `{"error":"database hiccup"}`
		}
		return 201, `{"order_id":"o1"}`
	}
	dbRoute := httpidem.Route{Operation: "order.create"}
	extRoute := httpidem.Route{Operation: "mail.send", External: true}
	tenant := func(*http.Request) (string, error) { return "tenant-a", nil }
	if flavor == "net/http" {
		cfg := httpidem.Config{Store: w.store, Service: "test", TenantFromRequest: tenant}
		h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			status, body := handle(r.Context())
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(status)
			_, _ = rw.Write([]byte(body))
		})
		mux := http.NewServeMux()
		mux.Handle("POST /db", httpidem.Wrap(cfg, dbRoute)(h))
		mux.Handle("POST /ext", httpidem.Wrap(cfg, extRoute)(h))
		recovered := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			defer func() {
				if recover() != nil {
					rw.WriteHeader(500)
				}
			}()
			mux.ServeHTTP(rw, r)
		})
		w.srv = httptest.NewServer(recovered)
	} else {
		cfg := httpidem.Config{Store: w.store, Service: "test", Tenant: func(*gin.Context) (string, error) { return "tenant-a", nil }}
		h := func(c *gin.Context) {
			if httpidem.Tx(c) != httpidem.TxFrom(c.Request.Context()) {
				panic("Tx(c) is not the route's transaction")
			}
			status, body := handle(c.Request.Context())
			c.Data(status, "application/json", []byte(body))
		}
		r := gin.New()
		r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(500) }))
		r.POST("/db", httpidem.Middleware(cfg, dbRoute), h)
		r.POST("/ext", httpidem.Middleware(cfg, extRoute), h)
		w.srv = httptest.NewServer(r)
	}
	t.Cleanup(w.srv.Close)
	return f
}

// TestMiddleware_FailurePaths: every failure of a Middleware route leaves a way forward, on gin
// and on net/http. The cases share one database per flavor (distinct keys), run in order.
func TestMiddleware_FailurePaths(t *testing.T) {
	cases := []struct {
		name string
		run  func(*testing.T, *failingRoutes)
	}{
		{"5xxRollsBackAndTheRetryExecutesAgain", testFailure_5xxRollsBackAndTheRetryExecutesAgain},
		{"PanicRollsBackAndTheRetryExecutesAgain", testFailure_PanicRollsBackAndTheRetryExecutesAgain},
		{"RetryAfterACrashExecutesOnADatabaseRoute", testFailure_RetryAfterACrashExecutesOnADatabaseRoute},
		{"External5xxIsReplayedUntilAnOperatorReleasesIt", testFailure_External5xxIsReplayedUntilAnOperatorReleasesIt},
		{"ExternalHeldKeyMarkedFinalReplaysForever", testFailure_ExternalHeldKeyMarkedFinalReplaysForever},
		{"ExternalCrashIsHeldNotAnEndless409", testFailure_ExternalCrashIsHeldNotAnEndless409},
	}
	eachFlavor(t, func(t *testing.T, flavor string) {
		f := newFailingRoutes(t, flavor)
		for _, c := range cases {
			f.calls.Store(0)
			f.fail.Store(false)
			f.panic.Store(false)
			pgtest.Exec(t, f.db, `TRUNCATE shop_orders`)
			t.Run(c.name, func(t *testing.T) {
				f.t = t // helpers fail the case that runs
				c.run(t, f)
			})
		}
	})
}

func (f *failingRoutes) key(op, key string) *claim.Key {
	f.t.Helper()
	var ids []int64
	f.db.Raw(`SELECT id FROM idempotency_keys WHERE operation = ? AND key = ?`, op, key).Scan(&ids)
	if len(ids) != 1 {
		f.t.Fatalf("key %s/%s: %d rows", op, key, len(ids))
	}
	k, err := f.store.Get(f.t.Context(), ids[0])
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

func (f *failingRoutes) orders() int64 {
	var n int64
	f.db.Raw(`SELECT count(*) FROM shop_orders`).Scan(&n)
	return n
}

// A 5xx on a database-only route rolls the handler's writes back, and the next retry with the
// same key and intent executes again (attempt 2) instead of meeting a 409.
func testFailure_5xxRollsBackAndTheRetryExecutesAgain(t *testing.T, f *failingRoutes) {
	f.fail.Store(true)
	if r := f.post("/db", "tok-a", []string{"k-db"}, `{"sku":"x"}`); r.status != 500 || r.header.Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("first attempt: %+v", r)
	}
	if n := f.orders(); n != 0 {
		t.Fatalf("%d order rows survived the 500", n)
	}
	if k := f.key("order.create", "k-db"); k.State != claim.StateFailedRetryable || k.Held {
		t.Fatalf("after the 500: state %s held %v", k.State, k.Held)
	}
	f.fail.Store(false)
	r := f.post("/db", "tok-a", []string{"k-db"}, `{"sku":"x"}`)
	if r.status != 201 || r.header.Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("retry: %+v", r)
	}
	again := f.post("/db", "tok-a", []string{"k-db"}, `{"sku":"x"}`)
	if again.status != 201 || again.header.Get(httpidem.HeaderReplayed) != "true" {
		t.Fatalf("retry of the success: %+v", again)
	}
	k := f.key("order.create", "k-db")
	if k.State != claim.StateCompleted || k.Attempts != 2 || f.calls.Load() != 2 || f.orders() != 1 {
		t.Fatalf("state %s attempts %d calls %d orders %d", k.State, k.Attempts, f.calls.Load(), f.orders())
	}
}

// A panicking handler is a 5xx too: its writes roll back and the retry executes.
func testFailure_PanicRollsBackAndTheRetryExecutesAgain(t *testing.T, f *failingRoutes) {
	f.panic.Store(true)
	if r := f.post("/db", "tok-a", []string{"k-panic"}, `{}`); r.status != 500 {
		t.Fatalf("panic: %+v", r)
	}
	f.panic.Store(false)
	if r := f.post("/db", "tok-a", []string{"k-panic"}, `{}`); r.status != 201 || f.orders() != 1 {
		t.Fatalf("retry after a panic: %+v, %d orders", r, f.orders())
	}
}

// A retry that finds an earlier attempt crashed (lease expired) on a database-only route
// executes: the crashed attempt's transaction never committed.
func testFailure_RetryAfterACrashExecutesOnADatabaseRoute(t *testing.T, f *failingRoutes) {
	out, err := f.store.Claim(t.Context(), claim.Request{Tenant: "tenant-a", Operation: "order.create", Key: "k-crash", Intent: []byte(`{}`)})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatal(out, err)
	}
	pgtest.Exec(t, f.db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 s' WHERE id = ?`, out.KeyID)
	if r := f.post("/db", "tok-a", []string{"k-crash"}, `{}`); r.status != 201 {
		t.Fatalf("retry after a crash: %+v", r)
	}
}

// On a route with external effects and no lookup, a 5xx is stored and replayed (Stripe), the
// key is held, and an operator's release lets the next retry execute (attempt 2).
func testFailure_External5xxIsReplayedUntilAnOperatorReleasesIt(t *testing.T, f *failingRoutes) {
	f.fail.Store(true)
	first := f.post("/ext", "tok-a", []string{"k-ext"}, `{"to":"a"}`)
	if first.status != 500 {
		t.Fatalf("first: %+v", first)
	}
	f.fail.Store(false)
	for i := 0; i < 2; i++ {
		r := f.post("/ext", "tok-a", []string{"k-ext"}, `{"to":"a"}`)
		if r.status != 500 || r.header.Get(httpidem.HeaderReplayed) != "true" || r.body != first.body {
			t.Fatalf("retry %d: %+v", i, r)
		}
	}
	k := f.key("mail.send", "k-ext")
	if !k.Held || !k.NeedsAttention || f.calls.Load() != 1 {
		t.Fatalf("held %v attention %v calls %d", k.Held, k.NeedsAttention, f.calls.Load())
	}
	if err := keys.ReleaseForRetry(t.Context(), f.store, nil, k.ID, k.Version+1, "operator:x", "checked"); err == nil {
		t.Fatal("release at a stale version succeeded")
	}
	if err := keys.ReleaseForRetry(t.Context(), f.store, nil, k.ID, k.Version, "operator:x", "mail server log shows nothing sent"); err != nil {
		t.Fatal(err)
	}
	r := f.post("/ext", "tok-a", []string{"k-ext"}, `{"to":"a"}`)
	if r.status != 201 || r.header.Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("after release: %+v", r)
	}
	if k := f.key("mail.send", "k-ext"); k.State != claim.StateCompleted || k.Attempts != 2 || f.calls.Load() != 2 {
		t.Fatalf("state %s attempts %d calls %d", k.State, k.Attempts, f.calls.Load())
	}
}

// Marking a held key final makes its stored 5xx the permanent answer.
func testFailure_ExternalHeldKeyMarkedFinalReplaysForever(t *testing.T, f *failingRoutes) {
	f.fail.Store(true)
	f.post("/ext", "tok-a", []string{"k-final"}, `{}`)
	k := f.key("mail.send", "k-final")
	if err := keys.MarkFinal(t.Context(), f.store, nil, k.ID, k.Version, "operator:x", "sent, per the mail server"); err != nil {
		t.Fatal(err)
	}
	f.fail.Store(false)
	r := f.post("/ext", "tok-a", []string{"k-final"}, `{}`)
	if r.status != 500 || r.header.Get(httpidem.HeaderReplayed) != "true" || f.calls.Load() != 1 {
		t.Fatalf("after mark final: %+v calls %d", r, f.calls.Load())
	}
	if k := f.key("mail.send", "k-final"); k.State != claim.StateFailedFinal || k.Held {
		t.Fatalf("state %s held %v", k.State, k.Held)
	}
}

// A retry that finds an earlier attempt crashed on an External route is not a 409 forever: the
// key is held with an "outcome-unknown" answer that every retry gets until an operator decides.
func testFailure_ExternalCrashIsHeldNotAnEndless409(t *testing.T, f *failingRoutes) {
	out, err := f.store.Claim(t.Context(), claim.Request{Tenant: "tenant-a", Operation: "mail.send", Key: "k-x", Intent: []byte(`{}`)})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatal(out, err)
	}
	pgtest.Exec(t, f.db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 s' WHERE id = ?`, out.KeyID)
	for i := 0; i < 2; i++ {
		r := f.post("/ext", "tok-a", []string{"k-x"}, `{}`)
		if r.status != 500 || problemType(t, r) != "outcome-unknown" || r.header.Get(httpidem.HeaderReplayed) != map[int]string{0: "", 1: "true"}[i] {
			t.Fatalf("retry %d: %+v", i, r)
		}
	}
	if f.calls.Load() != 0 {
		t.Fatal("the handler ran although an earlier attempt may have acted")
	}
	k := f.key("mail.send", "k-x")
	if err := keys.ReleaseForRetry(t.Context(), f.store, nil, k.ID, k.Version, "operator:x", "nothing sent"); err != nil {
		t.Fatal(err)
	}
	if r := f.post("/ext", "tok-a", []string{"k-x"}, `{}`); r.status != 201 || f.calls.Load() != 1 {
		t.Fatalf("after release: %+v", r)
	}
}

// A handler slower than the lease keeps it (renewed while it runs): a retry meanwhile answers
// 409, and the handler's answer is recorded, not lost to a takeover.
func TestMiddleware_SlowHandlerKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	const ttl = 2 * time.Second
	store, err := claim.NewStore(w.db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret"), LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	started, gate := make(chan struct{}, 1), make(chan struct{})
	cfg := httpidem.Config{Store: store, Service: "test", TenantFromRequest: func(*http.Request) (string, error) { return "tenant-a", nil }}
	w.srv = httptest.NewServer(httpidem.Wrap(cfg, httpidem.Route{Operation: "report.build"})(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		started <- struct{}{}
		<-gate // the handler runs until the test has retried, however slow the machine
		rw.WriteHeader(201)
	})))
	t.Cleanup(w.srv.Close)
	done := make(chan resp)
	go func() { done <- w.post("/", "", []string{"k-slow"}, `{}`) }()
	<-started
	// Past the first lease's expiry (claimed plus one TTL): only the renewals keep the key.
	pgtest.SleepUntil(t, w.db, `SELECT created_at + interval '2.7 s' FROM idempotency_keys WHERE key = 'k-slow'`)
	r := w.post("/", "", []string{"k-slow"}, `{}`)
	close(gate)
	if r.status != 409 {
		t.Fatalf("retry while the slow handler runs: %+v", r)
	}
	if r := <-done; r.status != 201 || calls.Load() != 1 {
		t.Fatalf("slow handler: %+v, %d calls", r, calls.Load())
	}
}
