package costcurve

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/migrations"
	"github.com/idemops/idemops/reconcile"
)

// The seeded world: n keys of 100 tenants, ids ascending with created_at, laid out so that every
// path has work that grows with n:
//
//   - 80% over the 26 days from t0−30d to t0−4d (the oldest day is what the purge benchmark
//     expires and purges);
//   - 10% on one UTC calendar day three days back (the bill day: all payment.charge, the
//     statement of the reconciliation benchmark lists them);
//   - 10% in the last 24 hours (the dashboard's window: its old cost grew with this day).
//
// States: ~94% completed, 4% failed_final, 2% failed_retryable (a quarter of them held and
// needing attention), and the newest 0.05% processing under live leases (the reclaimer finds
// nothing expired). Keys are "order-<i>", downstream keys "ORD-<i>", so a path can name any key.

// seedVersion changes whenever the layout above changes, so that a kept world is seeded again.
const seedVersion = 3

const tenants = 100

var benchSecret = []byte("costcurve-digest-secret-0123456789")

// cheapArgon keeps the benchmark operators' sign-in fast.
var cheapArgon = access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}

// TestMain drops the worlds' databases at the end, unless IDEMOPS_BENCH_KEEP asks to keep
// them for the next run (on a cluster that outlives it: DATABASE_URL set).
func TestMain(m *testing.M) {
	pgtest.MainThen(m, func() {
		if os.Getenv("IDEMOPS_BENCH_KEEP") == "" {
			dropWorlds()
		}
	})
}

// sizes are the key counts every benchmark runs at: IDEMOPS_BENCH_SIZES (e.g. "100k,1M,10M"),
// else 100k and 1M. 10M keys take ~10 GB of disk and most of an hour to seed on two cores, so
// only a run that asks for them gets them.
func sizes(b *testing.B) []int {
	spec := os.Getenv("IDEMOPS_BENCH_SIZES")
	if spec == "" {
		spec = "100k,1M"
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			mult, f = 1_000, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, strings.TrimSuffix(f, "M")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n*mult < 10_000 {
			b.Fatalf("IDEMOPS_BENCH_SIZES=%q: want sizes like 100k,1M,10M (each at least 10k)", spec)
		}
		out = append(out, n*mult)
	}
	return out
}

// label names a size the way sub-benchmarks show it: keys=100k, keys=10M.
func label(n int) string {
	switch {
	case n%1_000_000 == 0:
		return "keys=" + strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return "keys=" + strconv.Itoa(n/1_000) + "k"
	}
	return "keys=" + strconv.Itoa(n)
}

// forEachSize runs fn as one sub-benchmark per size, on that size's world.
func forEachSize(b *testing.B, fn func(b *testing.B, w *world)) {
	for _, n := range sizes(b) {
		b.Run(label(n), func(b *testing.B) { fn(b, worldOf(b, n)) })
	}
}

// world is one seeded database and a console on it.
type world struct {
	n       int
	name    string
	url     string
	db      *gorm.DB
	console *gorm.DB  // the console's handle: under the operator's tenants (tenantdb)
	t0      time.Time // the seed's now
	billDay time.Time // UTC midnight of the bill day
	srv     *console.Server
	h       http.Handler
	// tokens of an administrator of every tenant and of a viewer of three tenants
	adminToken, scopedToken string
	// admin's and the scoped viewer's session cookies (pages)
	adminCookies, scopedCookies []*http.Cookie
}

var (
	worldsMu sync.Mutex
	worlds   = map[int]*world{}
)

// worldOf returns the world of n keys, seeding it on first use in this process (or reusing the
// database a run with IDEMOPS_BENCH_KEEP=1 left, when its seed is current and under a day old).
func worldOf(b *testing.B, n int) *world {
	b.Helper()
	worldsMu.Lock()
	defer worldsMu.Unlock()
	if w := worlds[n]; w != nil {
		return w
	}
	ctx := context.Background()
	w := &world{n: n, name: "costcurve_" + strconv.Itoa(n)}
	hash, err := migrations.Hash()
	if err != nil {
		b.Fatal(err)
	}
	admin := adminDB(b)
	defer admin.Close()
	w.url = databaseURL(b, w.name)
	if !w.reusable(ctx, admin, hash) {
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+w.name+` WITH (FORCE)`); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+w.name); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := w.seed(ctx, hash); err != nil {
			b.Fatalf("seed %d keys: %v", n, err)
		}
		b.Logf("seeded %d keys in %s", n, time.Since(start).Round(time.Second))
	}
	if w.db, err = pgpool.Open(w.url); err != nil {
		b.Fatal(err)
	}
	// The console reads through its own handle, as the tenant role for an operator of some
	// tenants (row-level security, migration 00118), as `idemops console` does.
	sqlDB, err := w.db.DB()
	if err != nil {
		b.Fatal(err)
	}
	if err := migrations.EnsureTenantRole(ctx, sqlDB); err != nil {
		b.Fatal(err)
	}
	if w.console, err = tenantdb.Open(w.url); err != nil {
		b.Fatal(err)
	}
	w.startConsole(b)
	worlds[n] = w
	return w
}

// adminDB is the cluster's own database (DATABASE_URL), where databases are made and dropped.
func adminDB(b *testing.B) *sql.DB {
	b.Helper()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		b.Fatal(err)
	}
	return db
}

func databaseURL(b *testing.B, name string) string {
	b.Helper()
	u, err := url.Parse(os.Getenv("DATABASE_URL"))
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// reusable reports whether a kept database of this world holds the current seed.
func (w *world) reusable(ctx context.Context, admin *sql.DB, hash string) bool {
	if os.Getenv("IDEMOPS_BENCH_KEEP") == "" {
		return false
	}
	var exists bool
	if admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, w.name).Scan(&exists); !exists {
		return false
	}
	db, err := sql.Open("pgx", w.url)
	if err != nil {
		return false
	}
	defer db.Close()
	var version, n int
	var h string
	var t0, bill time.Time
	err = db.QueryRowContext(ctx, `SELECT version, n, migrations, t0, bill_day FROM costcurve_seed`).Scan(&version, &n, &h, &t0, &bill)
	if err != nil || version != seedVersion || n != w.n || time.Since(t0) > 20*time.Hour {
		return false
	}
	if h != hash {
		// Migrations added since the seed are applied to it (a 10M world takes most of an hour
		// to seed, a new index minutes to build): the layout is the seed's, the schema current.
		if err := migrations.Up(ctx, db); err != nil {
			return false
		}
		if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
			return false
		}
		if _, err := db.ExecContext(ctx, `UPDATE costcurve_seed SET migrations = $1`, hash); err != nil {
			return false
		}
	}
	w.t0, w.billDay = t0.UTC(), bill.UTC()
	return true
}

// dropWorlds drops every world's database (the run did not ask to keep them).
func dropWorlds() {
	worldsMu.Lock()
	defer worldsMu.Unlock()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		return
	}
	defer db.Close()
	for _, w := range worlds {
		if w.srv != nil {
			w.srv.Close()
		}
		for _, h := range []*gorm.DB{w.console, w.db} {
			if h == nil {
				continue
			}
			if sqlDB, err := h.DB(); err == nil {
				sqlDB.Close()
			}
		}
		db.Exec(`DROP DATABASE IF EXISTS ` + w.name + ` WITH (FORCE)`)
	}
}

// seed migrates the world's database and fills idempotency_keys by COPY: the table's secondary
// indexes are dropped first and built again after (a bulk load's usual way; the indexes are the
// migrations' own, read back from the catalog).
func (w *world) seed(ctx context.Context, hash string) error {
	sqlDB, err := sql.Open("pgx", w.url)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	if err := migrations.Up(ctx, sqlDB); err != nil {
		return err
	}
	w.t0 = time.Now().UTC().Truncate(time.Second)
	w.billDay = w.t0.Add(-72 * time.Hour).Truncate(24 * time.Hour)

	conn, err := pgx.Connect(ctx, w.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '1GB'`); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'idempotency_keys'
		AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = 'idempotency_keys'::regclass)`)
	if err != nil {
		return err
	}
	var names, defs []string
	for rows.Next() {
		var n, d string
		if err := rows.Scan(&n, &d); err != nil {
			return err
		}
		names, defs = append(names, n), append(defs, d)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, `DROP INDEX `+n); err != nil {
			return err
		}
	}
	// Row triggers (the dashboard's counters) are rebuilt in one statement after the load.
	if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_keys DISABLE TRIGGER USER`); err != nil {
		return err
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"idempotency_keys"}, seedColumns, &keySource{w: w}); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_keys ENABLE TRIGGER USER`); err != nil {
		return err
	}
	for _, d := range defs {
		if _, err := conn.Exec(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE idempotency_keys`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE costcurve_seed AS SELECT $1::int AS version, $2::int AS n, $3::text AS migrations,
		$4::timestamptz AS t0, $5::timestamptz AS bill_day`, seedVersion, w.n, hash, w.t0, w.billDay)
	return err
}

var seedColumns = []string{"tenant", "operation", "key", "key_digest", "fingerprint", "fingerprint_version", "request", "state",
	"lease_owner", "lease_token", "lease_expires_at", "attempts", "downstream_key", "amount_minor", "currency", "resource_id",
	"error_code", "needs_attention", "held", "created_at", "updated_at", "completed_at", "expires_at"}

// keySource generates the world's rows for COPY (pgx.CopyFromSource).
type keySource struct {
	w   *world
	i   int
	row []any
}

func (s *keySource) Next() bool {
	if s.i >= s.w.n {
		return false
	}
	s.row = s.w.row(s.i)
	s.i++
	return true
}
func (s *keySource) Values() ([]any, error) { return s.row, nil }
func (s *keySource) Err() error             { return nil }

// mix is splitmix64: the row's deterministic dice.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hex64(seed uint64) string {
	return fmt.Sprintf("%016x%016x%016x%016x", mix(seed), mix(seed+1), mix(seed+2), mix(seed+3))
}

// Where row i falls: the old days, the bill day, the last 24 hours.
func (w *world) createdAt(i int) time.Time {
	old, bill := w.n*8/10, w.n*9/10
	switch {
	case i < old:
		return w.t0.Add(-30*24*time.Hour + time.Duration(float64(26*24*time.Hour)*float64(i)/float64(old)))
	case i < bill:
		return w.billDay.Add(time.Duration(float64(24*time.Hour) * float64(i-old) / float64(bill-old)))
	}
	return w.t0.Add(-24*time.Hour + time.Duration(float64(24*time.Hour)*float64(i-bill)/float64(w.n-bill)))
}

func (w *world) onBillDay(i int) bool { return i >= w.n*8/10 && i < w.n*9/10 }

// tenantOf, operationOf and stateOf are row i's; amountOf its amount in cents.
func tenantOf(i int) string { return fmt.Sprintf("tenant-%02d", i%tenants) }

func (w *world) operationOf(i int) string {
	if w.onBillDay(i) {
		return "payment.charge"
	}
	switch i % 20 {
	case 0, 1, 2:
		return "order.create"
	case 3, 4, 5:
		return "refund.create"
	}
	return "payment.charge"
}

func (w *world) stateOf(i int) claim.State {
	if i >= w.n-w.n/2000 {
		return claim.StateProcessing
	}
	switch h := mix(uint64(i)) % 1000; {
	case h < 40:
		return claim.StateFailedFinal
	case h < 60:
		return claim.StateFailedRetryable
	}
	return claim.StateCompleted
}

// attention: a quarter of the failed_retryable keys are held and flagged.
func attention(i int) bool { return mix(uint64(i))%1000 >= 40 && mix(uint64(i))%1000 < 45 }

func amountOf(i int) int64 { return 100 + int64(mix(uint64(i)+7)%50_000) }

func (w *world) row(i int) []any {
	created := w.createdAt(i)
	st := w.stateOf(i)
	var leaseOwner, leaseToken, leaseExpires, completed, expires, resource, errCode any
	updated := created
	switch st {
	case claim.StateProcessing:
		// A live lease for as long as any run of the benchmarks lasts.
		leaseOwner, leaseToken, leaseExpires = "svc-1", fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(i), i), w.t0.Add(7*24*time.Hour)
	case claim.StateCompleted, claim.StateFailedFinal:
		c := created.Add(2 * time.Second)
		completed, updated, expires = c, c, c.Add(400*24*time.Hour)
		if st == claim.StateCompleted {
			resource = "pay_" + strconv.Itoa(i)
		} else {
			errCode = "card_declined"
		}
	case claim.StateFailedRetryable:
		updated = created.Add(2 * time.Second)
		errCode = "channel_unavailable"
	}
	att := st == claim.StateFailedRetryable && attention(i)
	amount := amountOf(i)
	request := fmt.Sprintf(`{"amount":%d,"currency":"USD","customer":{"id":"c%d"}}`, amount, mix(uint64(i)+11)%50_000)
	return []any{tenantOf(i), w.operationOf(i), "order-" + strconv.Itoa(i), hex64(uint64(i) * 4), hex64(uint64(i)*4 + 1_000_000_007), 1,
		request, string(st), leaseOwner, leaseToken, leaseExpires, 1, fmt.Sprintf("ORD-%010d", i), amount, "USD", resource,
		errCode, att, att, created, updated, completed, expires}
}

// startConsole starts a console on the world's database, with an administrator of every tenant
// and a viewer of three, each with a token (the JSON API) and a session (the pages).
func (w *world) startConsole(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	st, err := claim.NewStore(w.db, claim.Config{DigestSecret: benchSecret})
	if err != nil {
		b.Fatal(err)
	}
	keyring, err := reconcile.NewKeyring(benchSecret)
	if err != nil {
		b.Fatal(err)
	}
	w.srv, err = console.New(console.Config{DB: w.console, Claims: st, Argon2: cheapArgon,
		Throttle:  access.ThrottleConfig{UserLimit: 1000, IPLimit: 1000, Window: time.Minute, Lockout: time.Second},
		Reconcile: reconcile.Config{Sources: reconcile.SourcePolicy{FileRoot: os.TempDir()}, Keyring: keyring}})
	if err != nil {
		b.Fatal(err)
	}
	w.h = w.srv.Handler()
	// Operators and their tokens are per run (a kept database keeps the keys only).
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	ops := w.srv.Operators()
	mk := func(name string, role access.Role, tenants ...string) (string, []*http.Cookie) {
		name += "-" + suffix
		if _, err := ops.Add(ctx, access.Change{Actor: "bench"}, access.NewOperator{Name: name, Password: "correct horse battery",
			Role: role, Tenants: tenants}); err != nil {
			b.Fatal(err)
		}
		tok, err := ops.CreateToken(ctx, access.Change{Actor: "bench"}, name, "bench", 0)
		if err != nil {
			b.Fatal(err)
		}
		return tok, w.signIn(b, name)
	}
	w.adminToken, w.adminCookies = mk("admin", access.RoleAdmin, access.AllTenants)
	w.scopedToken, w.scopedCookies = mk("viewer", access.RoleViewer, tenantOf(1), tenantOf(2), tenantOf(3))
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs name in through the login form, as a browser does, and returns the session's
// cookies.
func (w *world) signIn(b *testing.B, name string) []*http.Cookie {
	b.Helper()
	rec := w.serve(httptest.NewRequest("GET", "/login", nil))
	m := csrfField.FindStringSubmatch(rec.Body.String())
	if m == nil {
		b.Fatalf("login page: no csrf field (%d)", rec.Code)
	}
	form := url.Values{"csrf": {m[1]}, "name": {name}, "password": {"correct horse battery"}}
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://example.com")
	for _, c := range rec.Result().Cookies() {
		req.AddCookie(c)
	}
	rec = w.serve(req)
	if rec.Code != http.StatusSeeOther && rec.Code != http.StatusFound {
		b.Fatalf("sign in %s: %d %s", name, rec.Code, rec.Body.String())
	}
	return rec.Result().Cookies()
}

func (w *world) serve(req *http.Request) *httptest.ResponseRecorder {
	req.RemoteAddr = "127.0.0.1:40000"
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, req)
	return rec
}

// api is one GET of the JSON API with token; it fails the benchmark unless the answer is 200.
func (w *world) api(b *testing.B, token, path string) []byte {
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := w.serve(req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// apiPost is one POST of the JSON API with token and a JSON body.
func (w *world) apiPost(b *testing.B, token, path, body string) []byte {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := w.serve(req)
	if rec.Code != http.StatusOK {
		b.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// page is one GET of a console page with a session's cookies.
func (w *world) page(b *testing.B, cookies []*http.Cookie, path string) []byte {
	req := httptest.NewRequest("GET", path, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := w.serve(req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// timings samples fn: warm-up calls first, then samples calls, and reports p50 and p99 (ms)
// under name. It returns the p99.
func timings(b *testing.B, name string, warm, samples int, fn func(i int)) time.Duration {
	b.Helper()
	if lim := sampleCap(); lim > 0 {
		warm, samples = min(warm, lim), min(samples, lim)
	}
	for i := 0; i < warm; i++ {
		fn(i)
	}
	ds := make([]time.Duration, 0, samples)
	for i := 0; i < samples; i++ {
		t := time.Now()
		fn(warm + i)
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	p50, p99 := ds[len(ds)/2], ds[min(len(ds)-1, (len(ds)*99+99)/100-1)]
	b.ReportMetric(ms(p50), name+"_p50_ms")
	b.ReportMetric(ms(p99), name+"_p99_ms")
	b.Logf("%s: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d samples)", name, ms(p50), ms(p99), ms(ds[len(ds)-1]), samples)
	return p99
}

// sampleCap is IDEMOPS_BENCH_SAMPLES: at most this many warm-up calls and samples per case (the
// harness's smoke test runs every path a few times; 0: the benchmarks' own counts).
func sampleCap() int {
	n, _ := strconv.Atoi(os.Getenv("IDEMOPS_BENCH_SAMPLES"))
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// target reports whether got is within the target, and logs both.
func target(b *testing.B, what string, got, limit time.Duration) {
	b.Helper()
	verdict := "meets"
	if got > limit {
		verdict = "MISSES"
	}
	b.Logf("%s %.2f ms %s the target ≤ %.0f ms", what, ms(got), verdict, ms(limit))
}
