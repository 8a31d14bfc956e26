package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/migrations"
)

// The cells proof's load and windows. The bound on cell b's p99 is the (1.2× idle);
// what makes the comparison fair on a shared 2-core machine is that both windows are adjacent,
// equally long, carry the same paced load through the same code, and hold enough samples for
// their 99th percentiles to be read from many calls, not a few.
const (
	cellsRateEvery = 16 * time.Millisecond // each worker's pace: ~62 requests/s
	cellsWorkers   = 1                     // per tenant
	cellsWarmUp    = 3 * time.Second
	cellsIdle      = 14 * time.Second // traffic before the kill; the idle window is its tail
	cellsWindowMin = 10 * time.Second // the kill window: at least this, and until cell a serves claims again + 2 s
	cellsP99Bound  = 1.2
)

// cellRig is one cell of the proof: a pg_auto_failover pair, its pool and its claim store.
type cellRig struct {
	name  string
	set   *pgha.Set
	db    *gorm.DB
	store *claim.Store
}

// startCellRigs starts one pg_auto_failover set per name side by side (the sets pick distinct
// ports and keep their monitors, sockets and files apart), migrated, each with its own pool and
// claim store. Bounded: an error names the cell and what failed, on one line.
func startCellRigs(t *testing.T, ctx context.Context, names ...string) []*cellRig {
	t.Helper()
	var log io.Writer
	if os.Getenv("PGHA_LOG") != "" {
		log = os.Stderr
	}
	rigs := make([]*cellRig, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &cellRig{name: name}
			rigs[i] = r
			errs[i] = r.start(ctx, log)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		began := time.Now()
		var wg sync.WaitGroup
		for _, r := range rigs {
			wg.Add(1)
			go func() { defer wg.Done(); r.stop() }()
		}
		wg.Wait()
		t.Logf("cells stopped in %.1f s", time.Since(began).Seconds())
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("cell %s: %s", names[i], strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	return rigs
}

func (r *cellRig) start(ctx context.Context, log io.Writer) error {
	var err error
	if r.set, err = pgha.Start(ctx, pgha.Options{StartTimeout: 90 * time.Second, Log: log}); err != nil {
		return err
	}
	if err := r.set.CreateDatabase(ctx, "idemops"); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	if r.db, err = pgpool.Open(r.set.URL("idemops")); err != nil {
		return err
	}
	sqlDB, err := r.db.DB()
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := migrations.Up(mctx, sqlDB); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	r.store, err = claim.NewStore(r.db, claim.Config{DigestSecret: []byte("cells-proof-secret-0123456"), Owner: "cell-" + r.name,
		Quarantine: 2 * time.Second, LookupBackoff: 500 * time.Millisecond, Logger: quiet})
	return err
}

func (r *cellRig) stop() {
	if r == nil {
		return
	}
	if r.db != nil {
		if s, err := r.db.DB(); err == nil {
			s.Close()
		}
	}
	if r.set != nil {
		r.set.Stop()
	}
}

// ledger is the business side effect downstream of every cell: one charge per downstream key,
// counted, so that a key executed twice — in one cell or in two — shows as a double.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) count(dkey string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charges[dkey]
}

// ledgerCharge is the proof's operation: Execute charges the ledger, Lookup finds a charge,
// Apply writes the demo's payments row (a business row the tenant move must carry with its key).
type ledgerCharge struct{ l *ledger }

func (ledgerCharge) Name() string { return demo.OperationCharge }
func (ledgerCharge) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency"}
}
func (o ledgerCharge) Execute(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	o.l.charges[l.DownstreamKey]++
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:16]}, nil
}
func (o ledgerCharge) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	if o.l.count(l.DownstreamKey) == 0 {
		return nil, nil
	}
	return &claim.Document{ResourceID: "ch_" + l.DownstreamKey[:16]}, nil
}
func (ledgerCharge) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return demo.ApplyPayment(ctx, tx, l, doc)
}

// cellCall is one attempt of one request: when its claim started, how long the claim took, and
// how it ended.
type cellCall struct {
	cell    string
	start   time.Time
	claimed time.Duration
	err     error
}

// cellRequest is one logical request (one key) and its end.
type cellRequest struct {
	tenant, key string
	acked       bool // the client got the key's final answer (completed, or a replay of it)
}

// cellTraffic paces requests for every tenant through the router, recording each attempt.
type cellTraffic struct {
	route func(tenant string) (*cellRig, error)
	op    ledgerCharge

	mu       sync.Mutex
	calls    []cellCall
	requests []*cellRequest
}

// run sends cellsWorkers paced workers per tenant until ctx ends; each request retries its key
// (a fresh route each time) until it has the key's answer, for at most 20 s.
func (tr *cellTraffic) run(ctx context.Context, tenants []string) (wait func()) {
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		for w := range cellsWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(cellsRateEvery)
				defer tick.Stop()
				for n := 0; ; n++ {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					req := &cellRequest{tenant: tenant, key: fmt.Sprintf("%s-%d-%d", tenant, w, n)}
					tr.mu.Lock()
					tr.requests = append(tr.requests, req)
					tr.mu.Unlock()
					tr.send(ctx, req)
				}
			}()
		}
	}
	return wg.Wait
}

func (tr *cellTraffic) send(ctx context.Context, req *cellRequest) {
	body, _ := json.Marshal(map[string]any{"amount_minor": 100 + len(req.key), "currency": "CNY",
		"merchant_order_no": req.key, "payee": "blue-coffee"})
	deadline := time.Now().Add(20 * time.Second)
	for wait := 20 * time.Millisecond; time.Now().Before(deadline) && ctx.Err() == nil; wait = min(2*wait, 500*time.Millisecond) {
		acked, retry := tr.attempt(req, body)
		if acked {
			req.acked = true
			return
		}
		if !retry {
			return
		}
		time.Sleep(wait) // the client's backoff between attempts with one key
	}
}

// attempt is one try: claim (timed), then drive the lease to its end.
func (tr *cellTraffic) attempt(req *cellRequest, body []byte) (acked, retry bool) {
	rig, err := tr.route(req.tenant)
	if err != nil {
		tr.record(cellCall{start: time.Now(), err: err})
		return false, true
	}
	// As long as the store's reconnect window: an attempt cut by a failover learns from the
	// promoted standby what its claim or completion did, instead of leaving a lease to expire.
	ctx, cancel := context.WithTimeout(context.Background(), claim.DefaultReconnectWindow)
	defer cancel()
	started := time.Now()
	out, err := rig.store.Claim(ctx, claim.Request{Tenant: req.tenant, Operation: tr.op.Name(), Key: req.key,
		Intent: body, Spec: tr.op.Intent(), Actor: "service:cells-proof"})
	call := cellCall{cell: rig.name, start: started, claimed: time.Since(started), err: err}
	if err == nil && out.Kind == claim.Acquired {
		out, err = rig.store.Drive(ctx, tr.op, out.Lease, claim.DriveOptions{Execute: true})
		call.err = err
	}
	tr.record(call)
	if err != nil {
		return false, true
	}
	switch out.Kind {
	case claim.Completed, claim.Recovered, claim.Replay:
		return true, false
	case claim.InProgress:
		return false, true
	}
	return false, false
}

func (tr *cellTraffic) record(c cellCall) {
	tr.mu.Lock()
	tr.calls = append(tr.calls, c)
	tr.mu.Unlock()
}

// window returns the claim latencies and errors of cell's attempts that started in [from, to).
func (tr *cellTraffic) window(cell string, from, to time.Time) (lat []time.Duration, errs []error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.calls {
		if c.cell != cell || c.start.Before(from) || !c.start.Before(to) {
			continue
		}
		if c.err != nil {
			errs = append(errs, c.err)
			continue
		}
		lat = append(lat, c.claimed)
	}
	return lat, errs
}

// firstClaimAfter is when the first successful claim of cell that started after t started.
func (tr *cellTraffic) firstClaimAfter(cell string, t time.Time) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.calls {
		if c.cell == cell && c.err == nil && c.start.After(t) {
			return c.start, true
		}
	}
	return time.Time{}, false
}

// p99 is the 99th percentile (nearest rank) of lat.
func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[int(math.Ceil(0.99*float64(len(s))))-1]
}

// synchronous checks that cell's primary waits for its standby before a commit returns.
func synchronous(t *testing.T, r *cellRig) {
	t.Helper()
	var names, state string
	if err := r.db.Raw(`SELECT current_setting('synchronous_standby_names'),
		COALESCE((SELECT string_agg(sync_state, ',') FROM pg_stat_replication), '')`).Row().Scan(&names, &state); err != nil {
		t.Fatalf("cell %s: %v", r.name, err)
	}
	if names == "" || (state != "quorum" && state != "sync") {
		t.Fatalf("cell %s: replication is not synchronous: synchronous_standby_names %q, standby %q", r.name, names, state)
	}
}

// TestCells_OneCellsFailoverLeavesTheOtherAlone: two cells, each a pg_auto_failover pair, carry
// paced traffic for two tenants each through their own claim stores. Cell a's primary is killed
// (-9); cell b's tenants must see no error at all, and cell b's claim p99 in the window from
// the kill until cell a serves claims again (and 2 s more) must stay within 1.2× its p99 over an
// equally long window of the same load just before the kill.
func TestCells_OneCellsFailoverLeavesTheOtherAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL HA sets")
	}
	ctx := context.Background()
	began := time.Now()
	rigs := startCellRigs(t, ctx, "a", "b")
	a, b := rigs[0], rigs[1]
	t.Logf("two cells up and migrated in %.1f s", time.Since(began).Seconds())
	cellOf := map[string]*cellRig{"acme": a, "initech": a, "globex": b, "umbrella": b}

	led := &ledger{charges: map[string]int{}}
	tr := &cellTraffic{op: ledgerCharge{l: led}, route: func(tenant string) (*cellRig, error) {
		r, ok := cellOf[tenant]
		if !ok {
			return nil, fmt.Errorf("tenant %q has no cell", tenant)
		}
		return r, nil
	}}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	wait := tr.run(trafficCtx, []string{"acme", "initech", "globex", "umbrella"})
	defer func() { stopTraffic(); wait() }()

	time.Sleep(cellsWarmUp + cellsIdle) // the idle phase: the scenario's own duration, not a wait
	synchronous(t, a)
	synchronous(t, b)
	primary, err := a.set.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	if err := a.set.Kill(primary); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	var back time.Time
	waitFor(t, cellsIdle-2*time.Second, "cell a serving claims again", func() bool {
		var ok bool
		back, ok = tr.firstClaimAfter("a", downAt)
		return ok
	})
	window := max(cellsWindowMin, back.Add(2*time.Second).Sub(killedAt))
	time.Sleep(time.Until(killedAt.Add(window))) // the kill window's own duration, not a wait
	stopTraffic()
	stopped := time.Now()
	wait()
	t.Logf("traffic stopped; its last requests ended in %.1f s", time.Since(stopped).Seconds())

	t.Logf("load average at the end: %s", loadAverage())
	idleLat, idleErrs := tr.window("b", killedAt.Add(-window), killedAt)
	killLat, killErrs := tr.window("b", killedAt, killedAt.Add(window))
	idle, during := p99(idleLat), p99(killLat)
	ratio := float64(during) / float64(idle)
	t.Logf("cell a: primary %s killed, claims back after %.1f s; cell b: idle p99 %s over %d claims, kill-window p99 %s over %d claims (%.1f s windows)",
		primary.Name, back.Sub(killedAt).Seconds(), idle, len(idleLat), during, len(killLat), window.Seconds())
	for i, err := range append(idleErrs, killErrs...) {
		if i == 5 {
			break
		}
		t.Errorf("cell b error: %v", err)
	}
	if len(idleErrs)+len(killErrs) > 0 {
		t.Errorf("cell b saw %d errors (%d before the kill, %d after)", len(idleErrs)+len(killErrs), len(idleErrs), len(killErrs))
	}
	if len(idleLat) < 1000 || len(killLat) < 1000 {
		t.Errorf("too few claims to read a p99: %d idle, %d in the kill window", len(idleLat), len(killLat))
	}
	if ratio > cellsP99Bound {
		t.Errorf("cell b's claim p99 is %.2f× idle (%s vs %s), want ≤ %.1f×", ratio, during, idle, cellsP99Bound)
	}
	fmt.Printf("cells: 2 cells; cell a primary killed: cell b errors %d, p99 %.2f× idle\n", len(idleErrs)+len(killErrs), ratio)
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages, for the log beside timings.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
