package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pagecheck"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// cheapArgon keeps password hashing fast in tests; production uses DefaultArgon2.
var cheapArgon = access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}

var testSecret = []byte("test-digest-secret-0123456789")

// testKeyring seals the tests' channel credentials and source secrets.
var testKeyring, _ = reconcile.NewKeyring(testSecret)

// bundle is one test's console on its own database.
type bundle struct {
	daemon *daemon.Daemon // runJobs
	t      *testing.T
	db     *gorm.DB
	srv    *Server
	claims *claim.Store
	ts     *httptest.Server
	ops    map[string]*access.Operator
	fakeOp *fakeOp
}

// fakeOp is a downstream that answers lookups from a map and records executions in it (the
// database is real; downstream is not).
type fakeOp struct {
	name     string
	mu       sync.Mutex
	found    map[string]string // downstream key → resource id
	err      error
	executes atomic.Int64
}

func (f *fakeOp) Name() string { return f.name }
func (f *fakeOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency"}
}
func (f *fakeOp) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	f.executes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "ch_sent_" + l.DownstreamKey[:8]
	f.found[l.DownstreamKey] = id
	return &claim.Document{ResourceID: id}, nil
}
func (f *fakeOp) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.found[l.DownstreamKey]; ok {
		return &claim.Document{ResourceID: id}, nil
	}
	return nil, nil
}
func (f *fakeOp) Apply(_ context.Context, _ *gorm.DB, _ *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return &claim.Snapshot{Status: 201, Body: []byte(`{"charge":"` + doc.ResourceID + `"}`), ResourceID: doc.ResourceID}, nil
}

// has puts a document downstream under k's downstream key.
func (f *fakeOp) has(k *claim.Key, resourceID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.found[k.DownstreamKey] = resourceID
}

// setup is the bundle of a test that runs in parallel with the others (River's setup(t)): its own
// database, a console on it, a fake downstream.
func setup(t *testing.T, mod ...func(*Config)) *bundle {
	t.Helper()
	t.Parallel()
	return newBundle(t, mod...)
}

func newBundle(t *testing.T, mod ...func(*Config)) *bundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := claim.NewStore(db, claim.Config{DigestSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	op := &fakeOp{name: "payment.charge", found: map[string]string{}}
	// The console reads and writes through its own handle, under the operator's tenants (row-
	// level security); the test seeds and checks as the tables' owner, as services do.
	cfg := Config{DB: pgtest.Tenant(t, db), Claims: st, Argon2: cheapArgon,
		Throttle:   access.ThrottleConfig{UserLimit: 3, IPLimit: 6, Window: time.Minute, Lockout: time.Minute},
		Operations: func(name string) (claim.Operation, bool) { return op, name == op.name },
		Reconcile:  reconcile.Config{Sources: reconcile.SourcePolicy{FileRoot: "/data"}, Keyring: testKeyring}}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	b := &bundle{t: t, db: db, srv: srv, claims: st, ops: map[string]*access.Operator{}}
	b.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(b.ts.Close)
	b.fakeOp = op
	return b
}

// addOperator creates an operator with password "correct horse battery".
func (b *bundle) addOperator(name string, role access.Role, tenants ...string) *access.Operator {
	b.t.Helper()
	o, err := b.srv.ops.Add(context.Background(), access.Change{Actor: "test"}, access.NewOperator{Name: name,
		Password: "correct horse battery", Role: role, Tenants: tenants})
	if err != nil {
		b.t.Fatal(err)
	}
	b.ops[name] = o
	return o
}

// client is a browser-like client: cookie jar, no redirect following.
type client struct {
	b    *bundle
	http *http.Client
	csrf string
}

func (b *bundle) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{b: b, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// signIn creates a session for name directly (no password round trip) and sets its cookie.
func (b *bundle) signIn(name string) *client {
	b.t.Helper()
	c := b.client()
	o := b.ops[name]
	id, err := b.srv.sessions.Create(context.Background(), o, "127.0.0.1", "test")
	if err != nil {
		b.t.Fatal(err)
	}
	sess, err := b.srv.sessions.Load(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	u, _ := url.Parse(b.ts.URL)
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: id, Path: "/"}})
	c.csrf = sess.CSRF
	return c
}

type resp struct {
	Status   int
	Body     string
	Header   http.Header
	Location string
}

func (c *client) do(req *http.Request) resp {
	c.b.t.Helper()
	r, err := c.http.Do(req)
	if err != nil {
		c.b.t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return resp{Status: r.StatusCode, Body: string(body), Header: r.Header, Location: r.Header.Get("Location")}
}

func (c *client) get(path string) resp {
	req, _ := http.NewRequest("GET", c.b.ts.URL+path, nil)
	return c.do(req)
}

// post sends a form; the session's CSRF token is added unless form already has "csrf" or
// noCSRF is set.
func (c *client) post(path string, form url.Values, withCSRF bool) resp {
	if form == nil {
		form = url.Values{}
	}
	if withCSRF && form.Get("csrf") == "" {
		form.Set("csrf", c.csrf)
	}
	req, _ := http.NewRequest("POST", c.b.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

func (c *client) api(path, token string) resp {
	req, _ := http.NewRequest("GET", c.b.ts.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return c.do(req)
}

// seedKey claims a key and, when complete, completes it with a response snapshot.
func (b *bundle) seedKey(tenant, op, key string, intent string, complete bool) *claim.Key {
	b.t.Helper()
	ctx := context.Background()
	out, err := b.claims.Claim(ctx, claim.Request{Tenant: tenant, Operation: op, Key: key, Intent: json.RawMessage(intent),
		Spec: claim.IntentSpec{AmountField: "amount", CurrencyField: "currency"}, Actor: "service:test"})
	if err != nil {
		b.t.Fatal(err)
	}
	if out.Kind != claim.Acquired {
		b.t.Fatalf("seed %s: %s", key, out.Kind)
	}
	if complete {
		snap := &claim.Snapshot{Status: 201, Headers: map[string]string{"Content-Type": "application/json"},
			Body: []byte(`{"charge":"ch_` + key + `","secret_note":"RESPONSE-` + key + `"}`), ResourceID: "ch_" + key}
		if err := b.claims.Complete(ctx, nil, out.Lease, snap); err != nil {
			b.t.Fatal(err)
		}
	}
	k, err := b.claims.Get(ctx, out.KeyID)
	if err != nil {
		b.t.Fatal(err)
	}
	return k
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// mustContain fails unless body holds each of subs, as markup or in the text a reader sees
// (pagecheck.Text: a sentence is found however the page marks up its data, amounts and times).
func mustContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	text := ""
	for _, s := range subs {
		if strings.Contains(body, s) {
			continue
		}
		if text == "" {
			text = pagecheck.Text(body)
		}
		if !strings.Contains(text, s) {
			t.Errorf("%s: missing %q", what, s)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(body, s) {
			t.Errorf("%s: must not contain %q", what, s)
		}
	}
}
