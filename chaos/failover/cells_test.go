package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/changes"
	"github.com/idemops/idemops/migrations"
)

// The cells proof's load and windows. The bound on cell b's claim p99 is the issue's: 1.2× idle.
//
// How the p99 is read so that it measures cell a's failure and not the machine (the figures are in
// notes/36-cells-p99.md):
//   - Idle windows on both sides of the kill window, each with the kill window's claim count at
//     least, pooled: drift of the machine over the minute cancels (the kill window sits between
//     them), and the idle p99 is read over twice the claims.
//   - The proof runs in CPU groups of its own (cells_cpu_test.go): weighted far above the rest of the
//     machine, and inside that a group per cell and one for the client, so cell a's failover can
//     take no more CPU from cell b than a separate machine would, while what the cells really share
//     (this process: the router, pools, goroutines) still carries anything cell a's failure does to
//     cell b. Without the groups (at load 10-12 on the shared 2-core machine) cell b's idle p99 was
//     ~19 ms and two idle windows a minute apart differed by 0.69-1.32×: the noise was as large as
//     the bound.
//   - New WAL segments are not zero-filled (noWALZeroFill): with them each cell stalled 100-400 ms
//     about every 14 s of traffic, wherever that fell.
//   - The workers' ticks are spread over the pace, so the tenants' claims do not all meet the same
//     moment of the machine.
//   - The measurement is tested in every run: cell b's third tenant (cellsHurt) gets a delay of
//     twice cell b's idle p99 on 3% of its claims during the kill window, by a trigger in cell b,
//     and the same read of that tenant must exceed the bound.
//   - The kill's own side effects on the shared machine are gone (internal/pgha): the killed
//     node's shared memory is small (shared_buffers 16 MB: tearing down 128 MB stalled cell b's
//     claims in flight at the kill instant 14-32 ms in 6 of 11 runs), and waiting for the
//     promotion asks the monitor over one connection (not a backend forked every 100 ms).
//
// A Go execution trace of the proof found nothing cell a's failure does to cell b inside this
// process (no lock, dial storm or GC: cell b's slow claims wait on cell b's server). With the
// kill's side effects gone, 20 consecutive runs of the proof alone on a quiet machine read
// 0.47-1.18× (median 0.88×; notes/36-p99c.md), but one quiet make test read 1.42× with windows of
// 1,400 claims (kill window 3.7 ms against 2.6 ms idle; cell a's claims back after 8.7 s, not ~6:
// the whole machine was slow then). Sampled through 14 more make tests (load, CPU and I/O
// pressure, dirty pages, the busiest processes each second), phase 1 leaves nothing running into
// phase 2: the pgha nodes live in /dev/shm and run without fsync, dirty pages stay under 90 MB,
// and the disk writes ~45 MB through all of phase 2 (busy 30-200 ms of it). What is left are
// bursts of the machine's own, a second or so long, where cell b's per-second p99 reads 6-20 ms,
// in any window. So each window carries 2,800 of cell b's claims (~11 s): a burst moves a p99
// read over twice the claims half as far, and the kill window now spans cell a's failover and
// ~5 s after it. Windows of 1,400 read 0.95-1.11× in 6 quiet make tests, windows of 2,800
// 0.75-1.05× in 6 (and 1.26× in one run beside a compile started by hand: the bound is for a
// quiet machine, which make test's phase 2 is). make test asserts the bound. What the read does
// not settle — the kill lightens the shared machine (a healthy cell a's standby puts bursts on
// cell b), and without a kill the same read spreads 0.77-1.63× — is in docs/SCALING.md ("One
// cell's failover, seen from another cell").
//
// The phases are counted in claims, not timed: a phase ends when the traffic has carried its
// claims (each worker sends one attempt per cellsRateEvery, so a count is a duration at that
// pace); when the machine is slow they stretch in time and keep their claims.
const (
	cellsRateEvery = 16 * time.Millisecond // each worker's pace: ~62 requests/s
	cellsWorkers   = 1                     // per tenant; cell b's measured tenants have cellsMeasuredWorkers
	// Cell b's measured tenants send twice the claims of the others: a p99 read over ~700 claims
	// (the 7th slowest) swung 0.46-1.50× between two idle windows at load 7-12.
	cellsMeasuredWorkers = 2
	cellsMinClaims       = 2800 // cell b's claims in the kill window and in the idle windows, at least, to read a p99
	cellsP99Bound        = 1.2
	// The tenant of cell b whose claims are slowed on purpose in the kill window: its read must fail.
	cellsHurt        = "hooli"
	cellsHurtPercent = 3 // of its claims, each delayed by twice cell b's idle p99
	// How long a phase may take before the proof gives up on it (a timeout, not a pace).
	cellsFailoverLimit = 15 * time.Second // the standby promoted, and cell a serving claims again
	cellsPhaseLimit    = 90 * time.Second
)

// cellsPhases is how many successful claims each phase of the proof waits for, per tenant.
type cellsPhases struct {
	warmUp int // every tenant's, before the first idle window
	idle   int // each of cell b's measured tenants', in each idle window (before the kill, after it)
	window int // each of cell b's measured tenants', in the kill window
	settle int // each of cell a's tenants', after cell a serves claims again (inside the kill window)
	moved  int // the moved tenant's, in its new cell
}

// phases: the kill window and each idle window carry cellsMinClaims of cell b's two measured
// tenants (~11 s at their pace; the kill window lasts until cell a is back and settled, ~8 s,
// if that is longer); 4 s of warm-up (the first second of traffic on fresh pools ran at
// 2-3× the later p99), cell a given 2 s of claims after its recovery inside the kill window, and
// the moved tenant 2 s in its new cell.
func phases() cellsPhases {
	perSecond := int(time.Second / cellsRateEvery)
	return cellsPhases{warmUp: 4 * perSecond, idle: cellsMinClaims / 2, window: cellsMinClaims / 2,
		settle: 2 * perSecond, moved: 2 * perSecond}
}

// cellRig is one cell of the proof: a pg_auto_failover pair with a migrated idemops database.
type cellRig struct {
	name string
	set  *pgha.Set
}

// startCellRigs starts one pg_auto_failover set per name side by side (the sets pick distinct
// ports and keep their monitors, sockets and files apart), each with its idemops database
// migrated. Bounded: an error names the cell and what failed, on one line.
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
			if r.set != nil {
				wg.Add(1)
				go func() { defer wg.Done(); r.set.Stop() }()
			}
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

// start starts the set and migrates its database (here, so that both cells migrate side by
// side; cells.Open then finds nothing to apply).
func (r *cellRig) start(ctx context.Context, log io.Writer) error {
	var err error
	if r.set, err = pgha.Start(ctx, pgha.Options{StartTimeout: 90 * time.Second, Log: log}); err != nil {
		return err
	}
	if err := noWALZeroFill(ctx, r.set); err != nil {
		return err
	}
	if err := r.set.CreateDatabase(ctx, "idemops"); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	db, err := pgpool.Open(r.set.URL("idemops"))
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := migrations.Up(mctx, sqlDB); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// noWALZeroFill turns off the zero-filling of new WAL segment files on every node of set. A
// fresh cluster has no old segments to recycle, so every 16 MB of WAL had a backend (and on the
// standby the WAL receiver) write 16 MB of zeros while commits waited: a stall of 100-400 ms in
// a cell about every 14 s of the proof's traffic, whichever window it fell in. The nodes run with
// fsync off (pgha): the zeros protect nothing here.
func noWALZeroFill(ctx context.Context, set *pgha.Set) error {
	for _, n := range set.Nodes {
		conn, err := pgx.Connect(ctx, n.URL("postgres"))
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		_, err = conn.Exec(ctx, "ALTER SYSTEM SET wal_init_zero = off")
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		}
		conn.Close(ctx)
		if err != nil {
			return fmt.Errorf("node %s: wal_init_zero: %w", n.Name, err)
		}
	}
	return nil
}

// hurtSQL lets the proof slow one tenant's claims in a cell on purpose: while cells_proof_hurt
// names the tenant, percent of its new keys (by the key's hash) wait delay_ms before the claim's
// insert. Created before the traffic starts (a trigger created under traffic would lock the
// table); a tenant it does not name pays one indexed lookup per claim, in every window alike.
const hurtSQL = `
CREATE TABLE cells_proof_hurt (tenant text PRIMARY KEY, delay_ms int NOT NULL, percent int NOT NULL);
CREATE FUNCTION cells_proof_hurt() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE h cells_proof_hurt;
BEGIN
	SELECT * INTO h FROM cells_proof_hurt WHERE tenant = NEW.tenant;
	IF FOUND AND abs(hashtext(NEW.key)) % 100 < h.percent THEN
		PERFORM pg_sleep(h.delay_ms / 1000.0);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER cells_proof_hurt BEFORE INSERT ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION cells_proof_hurt();`

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
	cell    string // the cell the attempt was routed to ("" when it was not)
	tenant  string
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
	set *cells.Set
	op  ledgerCharge

	// steps hears each step of a move (its progress lines): a tenant the move froze retries
	// after one.
	steps changes.Changes

	mu       sync.Mutex
	calls    []cellCall
	requests []*cellRequest
	claims   map[string]int       // successful claims by cell and tenant ("a/acme")
	lastOK   map[string]time.Time // by cell: the latest start of a successful claim
	recorded changes.Changes      // each attempt recorded

	workers map[string]int // per tenant, where not cellsWorkers
}

func (tr *cellTraffic) workersOf(tenant string) int {
	if n, ok := tr.workers[tenant]; ok {
		return n
	}
	return cellsWorkers
}

// run sends paced workers (workersOf) for each tenant until ctx ends; each request retries its key
// (a fresh route each time) until it has the key's answer, for at most 20 s. The workers' ticks
// are spread evenly over the pace: claims of different tenants do not start in the same instant,
// so one hiccup of the machine meets one of them, not all.
func (tr *cellTraffic) run(ctx context.Context, tenants []string) (wait func()) {
	var wg sync.WaitGroup
	workers := 0
	for _, tenant := range tenants {
		workers += tr.workersOf(tenant)
	}
	slot := 0
	for _, tenant := range tenants {
		for w := range tr.workersOf(tenant) {
			offset := cellsRateEvery * time.Duration(slot) / time.Duration(workers)
			slot++
			wg.Add(1)
			go func() {
				defer wg.Done()
				select { // the worker's place in the pace
				case <-ctx.Done():
					return
				case <-time.After(offset):
				}
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
					tr.send(ctx, req, tick.C)
				}
			}()
		}
	}
	return wg.Wait
}

// How an attempt ended for its request.
type attemptEnd int

const (
	answered    attemptEnd = iota // the client has the key's answer
	retry                         // try again at the worker's next tick
	retryFrozen                   // the tenant is frozen by a move: try again after its next step
	unanswered                    // an end without the key's answer (not retried)
)

// send tries req until it has the key's answer, for at most 20 s. A retry takes the worker's next
// tick (the traffic's pace: new requests and retries alike); a tenant frozen by a move retries
// when the move has finished its next step — nothing else changes the fence's answer.
func (tr *cellTraffic) send(ctx context.Context, req *cellRequest, tick <-chan time.Time) {
	body, _ := json.Marshal(map[string]any{"amount_minor": 100 + len(req.key), "currency": "CNY",
		"merchant_order_no": req.key, "payee": "blue-coffee"})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		step := tr.steps.Next() // before the attempt: a step while it runs is not missed
		var nextTick <-chan time.Time
		var nextStep <-chan struct{}
		switch tr.attempt(req, body) {
		case answered:
			req.acked = true
			return
		case unanswered:
			return
		case retry:
			nextTick = tick
		case retryFrozen:
			nextStep = step
		}
		select {
		case <-ctx.Done():
			return
		case <-nextTick:
		case <-nextStep:
		}
	}
}

// attempt is one try: route by the tenant, claim (timed), then drive the lease to its end. A
// refusal because the tenant has moved out of the cell re-reads the map (the move rewrote it),
// as a service does; a tenant being moved waits for the move.
func (tr *cellTraffic) attempt(req *cellRequest, body []byte) attemptEnd {
	cell, err := tr.set.For(req.tenant)
	if err != nil {
		tr.record(cellCall{tenant: req.tenant, start: time.Now(), err: err})
		return retry
	}
	// As long as the store's reconnect window: an attempt cut by a failover learns from the
	// promoted standby what its claim or completion did, instead of leaving a lease to expire.
	ctx, cancel := context.WithTimeout(context.Background(), claim.DefaultReconnectWindow)
	defer cancel()
	started := time.Now()
	out, err := cell.Store.Claim(ctx, claim.Request{Tenant: req.tenant, Operation: tr.op.Name(), Key: req.key,
		Intent: body, Spec: tr.op.Intent(), Actor: "service:cells-proof"})
	call := cellCall{cell: cell.Name, tenant: req.tenant, start: started, claimed: time.Since(started), err: err}
	if err == nil && out.Kind == claim.Acquired {
		out, err = cell.Store.Drive(ctx, tr.op, out.Lease, claim.DriveOptions{Execute: true})
		call.err = err
	}
	tr.record(call)
	var moving *claim.TenantMovingError
	if errors.As(err, &moving) {
		if moving.State != claim.FenceGone {
			return retryFrozen
		}
		if rerr := tr.set.Refresh(ctx); rerr != nil {
			tr.record(cellCall{tenant: req.tenant, start: time.Now(), err: fmt.Errorf("refresh the map: %w", rerr)})
		}
		return retry
	}
	if err != nil {
		return retry
	}
	switch out.Kind {
	case claim.Completed, claim.Recovered, claim.Replay:
		return answered
	case claim.InProgress:
		return retry
	}
	return unanswered
}

func (tr *cellTraffic) record(c cellCall) {
	tr.mu.Lock()
	tr.calls = append(tr.calls, c)
	if c.err == nil && c.cell != "" {
		tr.claims[c.cell+"/"+c.tenant]++
		if c.start.After(tr.lastOK[c.cell]) {
			tr.lastOK[c.cell] = c.start
		}
	}
	tr.mu.Unlock()
	tr.recorded.Notify()
}

// await waits until cond holds, checking it (under tr.mu) again each time an attempt is
// recorded; it fails t after limit.
func (tr *cellTraffic) await(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	awaitSignal(t, &tr.recorded, limit, what, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return cond()
	})
}

// claimsFrom is a condition for await: each of tenants has had n more successful claims in cell
// than now, all started after now (one more per worker than n: a worker's attempt under way now
// may be recorded after this call).
func (tr *cellTraffic) claimsFrom(cell string, tenants []string, n int) func() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	base := map[string]int{}
	for _, tenant := range tenants {
		base[tenant] = tr.claims[cell+"/"+tenant]
	}
	return func() bool {
		for _, tenant := range tenants {
			if tr.claims[cell+"/"+tenant]-base[tenant] < n+tr.workersOf(tenant) {
				return false
			}
		}
		return true
	}
}

// window returns the claim latencies and errors of the attempts for tenants that started in
// [from, to).
func (tr *cellTraffic) window(tenants []string, from, to time.Time) (lat []time.Duration, errs []error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.calls {
		if !slices.Contains(tenants, c.tenant) || c.start.Before(from) || !c.start.Before(to) {
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

// clientStalls is a witness for the log: how late this process's 5-ms ticks ran, by when they
// were due. A stall of the client process (the machine's scheduler, a stop of the Go runtime)
// holds every tenant's claims in flight at once; in a window where cell b's p99 rose, a witness
// that stalled as long says the client could not run, one that did not says cell b's claims
// waited on something else.
type clientStalls struct {
	mu   sync.Mutex
	due  []time.Time
	late []time.Duration
}

func (c *clientStalls) run(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case due := <-tick.C:
			late := time.Since(due)
			c.mu.Lock()
			c.due, c.late = append(c.due, due), append(c.late, late)
			c.mu.Unlock()
		}
	}
}

// in is the witness over w: the p99 and the longest lateness of the ticks due in it.
func (c *clientStalls) in(w span) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var late []time.Duration
	for i, due := range c.due {
		if !due.Before(w.from) && due.Before(w.to) {
			late = append(late, c.late[i])
		}
	}
	if len(late) == 0 {
		return "-"
	}
	return fmt.Sprintf("p99 %s, max %s", p99(late).Round(100*time.Microsecond), slices.Max(late).Round(100*time.Microsecond))
}

// span is a window of the proof: the attempts that started in [from, to).
type span struct{ from, to time.Time }

// p99Read is some tenants' claim p99 through the kill: over the kill window, and over the idle
// windows on both sides of it pooled (the machine's drift across the minute cancels).
type p99Read struct {
	idle, kill    time.Duration
	idleN, killN  int
	before, after time.Duration // each idle window's own p99, for the log: how far the machine drifted
}

func (tr *cellTraffic) readP99(tenants []string, before, kill, after span) p99Read {
	b, _ := tr.window(tenants, before.from, before.to)
	a, _ := tr.window(tenants, after.from, after.to)
	k, _ := tr.window(tenants, kill.from, kill.to)
	idle := append(slices.Clone(b), a...)
	return p99Read{idle: p99(idle), kill: p99(k), idleN: len(idle), killN: len(k), before: p99(b), after: p99(a)}
}

func (r p99Read) ratio() float64 { return float64(r.kill) / float64(r.idle) }

func (r p99Read) String() string {
	return fmt.Sprintf("claim p99 %s over %d claims in the kill window, %s over %d in the idle windows (%s before, %s after): %.2f× idle",
		r.kill.Round(10*time.Microsecond), r.killN, r.idle.Round(10*time.Microsecond), r.idleN,
		r.before.Round(10*time.Microsecond), r.after.Round(10*time.Microsecond), r.ratio())
}

// perSecond is the claim p99 of tenants' attempts in each second of [from, to), in ms.
func (tr *cellTraffic) perSecond(tenants []string, from, to time.Time) string {
	var out []string
	for at := from; at.Before(to); at = at.Add(time.Second) {
		lat, _ := tr.window(tenants, at, at.Add(time.Second))
		out = append(out, fmt.Sprintf("%.0f", float64(p99(lat).Microseconds())/1000))
	}
	return strings.Join(out, " ")
}

// firstClaimAfter is when the first successful claim in cell, of one of tenants, that started
// after t returned. (Not when it started: a claim started just after the kill rides out the
// failover inside the store's reconnect window and returns after the promotion; by its start
// cell a looked "back after 0.0 s", an anomaly seen in 7 of 33 runs.)
func (tr *cellTraffic) firstClaimAfter(cell string, tenants []string, t time.Time) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var first time.Time
	for _, c := range tr.calls {
		if c.cell == cell && slices.Contains(tenants, c.tenant) && c.err == nil && c.start.After(t) {
			if end := c.start.Add(c.claimed); first.IsZero() || end.Before(first) {
				first = end
			}
		}
	}
	return first, !first.IsZero()
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
func synchronous(t *testing.T, c *cells.Cell) {
	t.Helper()
	var names, state string
	if err := c.DB.Raw(`SELECT current_setting('synchronous_standby_names'),
		COALESCE((SELECT string_agg(sync_state, ',') FROM pg_stat_replication), '')`).Row().Scan(&names, &state); err != nil {
		t.Fatalf("cell %s: %v", c.Name, err)
	}
	if names == "" || (state != "quorum" && state != "sync") {
		t.Fatalf("cell %s: replication is not synchronous: synchronous_standby_names %q, standby %q", c.Name, names, state)
	}
}

// keyRow is what a cell holds of one key: its state and its business rows.
type keyRow struct {
	Key      string
	State    claim.State
	Payments int
}

// keysIn reads tenant's keys in cell c, by key.
func keysIn(t *testing.T, c *cells.Cell, tenant string) map[string]keyRow {
	t.Helper()
	var rows []keyRow
	if err := c.DB.Raw(`SELECT k.key, k.state, (SELECT count(*) FROM payments p WHERE p.key_id = k.id) AS payments
		FROM idempotency_keys k WHERE k.tenant = ?`, tenant).Scan(&rows).Error; err != nil {
		t.Fatalf("cell %s: keys of %s: %v", c.Name, tenant, err)
	}
	out := make(map[string]keyRow, len(rows))
	for _, r := range rows {
		out[r.Key] = r
	}
	return out
}

// TestCells_AFailoverStaysInItsCellAndAMovedTenantLosesNothing: two cells, each a
// pg_auto_failover pair, carry paced traffic for their tenants (two in cell a, three in cell b),
// routed by a cell map (cells.Set: one pool and claim store per cell). Cell a's primary is killed
// (-9): cell b's tenants must see no error at all, and cell b's claim p99 over the kill window
// (from the kill until cell a serves claims again and 2 s of claims more, and at least
// cellsMinClaims) must stay within 1.2× its p99 over the idle windows just before and just after
// it, of the same load (see the top of the file for how it is read). The same read of cell b's
// third tenant, whose claims a trigger slows on purpose during the kill window, must exceed the
// bound: the read can fail. Then one of cell a's tenants moves to cell b under its own traffic
// (cells.Move): no key's charge may execute twice, and every key a client got its answer for must
// be in cell b, completed, with its one payments row.
func TestCells_AFailoverStaysInItsCellAndAMovedTenantLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL HA sets")
	}
	ctx := context.Background()
	cpu, isolated := isolateCPU(t, "a", "b")
	began := time.Now()
	rigs := startCellRigs(t, ctx, "a", "b")
	for _, r := range rigs {
		need(t, cpu.adopt(r.name, r.set.Dir))
	}
	const moving = "initech"
	measured := []string{"globex", "umbrella"} // cell b's tenants whose claim p99 is the proof's
	inB := append(slices.Clone(measured), cellsHurt)
	m, err := cells.New("a", []cells.CellSpec{
		{Name: "a", ID: 1, URL: rigs[0].set.URL("idemops"), Tenants: []string{"acme", moving}},
		{Name: "b", ID: 2, URL: rigs[1].set.URL("idemops"), Tenants: inB}})
	need(t, err)
	path := filepath.Join(t.TempDir(), "cells.yaml")
	need(t, cells.Write(path, m))
	m, err = cells.Load(path)
	need(t, err)
	secret := []byte("cells-proof-secret-0123456")
	set, err := cells.Open(ctx, m, cells.Options{Migrate: true,
		Claim: claim.Config{DigestSecret: secret, Owner: "cells-proof", Quarantine: 2 * time.Second,
			LookupBackoff: 500 * time.Millisecond, Logger: quiet}})
	need(t, err)
	defer set.Close()
	a, _ := set.Cell("a")
	b, _ := set.Cell("b")
	need(t, b.DB.Exec(hurtSQL).Error)
	upFor := time.Since(began)
	t.Logf("two cells up and migrated in %.1f s (load %s; cpu: %s)", upFor.Seconds(), loadAverage(), isolated)

	led := &ledger{charges: map[string]int{}}
	tr := &cellTraffic{set: set, op: ledgerCharge{l: led}, claims: map[string]int{}, lastOK: map[string]time.Time{},
		workers: map[string]int{}}
	for _, tenant := range measured {
		tr.workers[tenant] = cellsMeasuredWorkers
	}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	wait := tr.run(trafficCtx, []string{"acme", "globex", moving, "umbrella", cellsHurt})
	defer func() { stopTraffic(); wait() }()
	stalls := &clientStalls{}
	go stalls.run(trafficCtx)

	// The warm-up, then the idle window before the kill.
	ph := phases()
	inA := []string{"acme", moving}
	warm, warmB := tr.claimsFrom("a", inA, ph.warmUp), tr.claimsFrom("b", inB, ph.warmUp)
	tr.await(t, cellsPhaseLimit, "the warm-up's claims", func() bool { return warm() && warmB() })
	before := span{from: time.Now()}
	tr.await(t, cellsPhaseLimit, "the first idle window's claims", tr.claimsFrom("b", measured, ph.idle))

	// Cell a's primary killed; from now until the kill window ends, cellsHurt's claims in cell b
	// are slowed on purpose.
	synchronous(t, a)
	synchronous(t, b)
	primary, err := rigs[0].set.Primary(ctx)
	need(t, err)
	idleBefore, _ := tr.window(measured, before.from, time.Now())
	hurt := 2 * p99(idleBefore)
	need(t, b.DB.Exec(`INSERT INTO cells_proof_hurt VALUES (?, ?, ?)`, cellsHurt, hurt.Milliseconds()+1, cellsHurtPercent).Error)
	killedAt := time.Now()
	before.to = killedAt
	killWindow := tr.claimsFrom("b", measured, ph.window)
	need(t, rigs[0].set.Kill(primary))
	downAt := time.Now()
	// The failover happened: the monitor promoted the standby (a kill that left the old
	// primary serving would make the windows compare nothing).
	pctx, cancel := context.WithTimeout(ctx, cellsFailoverLimit)
	promoted, err := rigs[0].set.WaitPromoted(pctx, primary)
	cancel()
	need(t, err)
	tr.await(t, cellsFailoverLimit, "cell a serving claims again", func() bool { return tr.lastOK["a"].After(downAt) })
	back, _ := tr.firstClaimAfter("a", inA, downAt)
	// The kill window: cell b's claims for it, and cell a's recovery inside it.
	settled := tr.claimsFrom("a", inA, ph.settle)
	tr.await(t, cellsPhaseLimit, "the kill window's claims", func() bool { return killWindow() && settled() })
	kill := span{from: killedAt, to: time.Now()}
	need(t, b.DB.Exec(`DELETE FROM cells_proof_hurt`).Error)
	killLoad := loadAverage()

	// The idle window after the kill, as many claims as the one before.
	after := span{from: time.Now()}
	tr.await(t, cellsPhaseLimit, "the second idle window's claims", tr.claimsFrom("b", measured, ph.idle))
	after.to = time.Now()

	// A tenant of cell a moved to cell b under its traffic.
	res, err := cells.Move(ctx, cells.MoveConfig{Map: set.Map(), Tenant: moving, To: "b", Progress: &tr.steps})
	need(t, err)
	moved := time.Now()
	tr.await(t, 20*time.Second+cellsPhaseLimit, "the moved tenant's claims in cell b", tr.claimsFrom("b", []string{moving}, ph.moved))
	t.Logf("the moved tenant's claims in cell b: %.1f s", time.Since(moved).Seconds())
	stopTraffic()
	stopped := time.Now()
	wait()
	t.Logf("traffic stopped; its last requests ended in %.1f s", time.Since(stopped).Seconds())

	// Cell b through the kill: no error for any of its tenants, its claim p99 within the bound,
	// and the same read of the tenant slowed on purpose over it.
	_, bErrs := tr.window(inB, began, time.Now())
	read := tr.readP99(measured, before, kill, after)
	control := tr.readP99([]string{cellsHurt}, before, kill, after)
	ratio := read.ratio()
	aLat, aErrs := tr.window(inA, kill.from, kill.to)
	t.Logf("cell a: primary %s killed, %s promoted, claims back after %.1f s, %d claims and %d failed attempts in the kill window (%.1f s; load %s)",
		primary.Name, promoted.Name, back.Sub(killedAt).Seconds(), len(aLat), len(aErrs), kill.to.Sub(kill.from).Seconds(), killLoad)
	t.Logf("cell b: %s; idle windows %.1f s before and %.1f s after", read, before.to.Sub(before.from).Seconds(), after.to.Sub(after.from).Seconds())
	t.Logf("cell b's claim p99 per second from the first idle window (kill at %.0f s, second idle window from %.0f s): %s",
		killedAt.Sub(before.from).Seconds(), after.from.Sub(before.from).Seconds(), tr.perSecond(measured, before.from, after.to))
	t.Logf("the windows by the wall clock: first idle %s, kill %s, cell a back %s, second idle %s–%s",
		before.from.Format("15:04:05.000"), killedAt.Format("15:04:05.000"), back.Format("15:04:05.000"),
		after.from.Format("15:04:05.000"), after.to.Format("15:04:05.000"))
	t.Logf("%s, %d%% of its claims slowed by %s in the kill window: %s", cellsHurt, cellsHurtPercent, hurt, control)
	t.Logf("this process's 5-ms ticks late by: %s before, %s in the kill window, %s after", stalls.in(before), stalls.in(kill), stalls.in(after))
	for i, err := range bErrs {
		if i == 5 {
			break
		}
		t.Errorf("cell b error: %v", err)
	}
	if len(bErrs) > 0 {
		t.Errorf("cell b's tenants saw %d errors", len(bErrs))
	}
	if read.idleN < cellsMinClaims || read.killN < cellsMinClaims {
		t.Errorf("too few claims to read a p99: %d idle, %d in the kill window", read.idleN, read.killN)
	}
	if ratio > cellsP99Bound {
		t.Errorf("cell b's claim p99 is %.2f× idle, want ≤ %.1f×", ratio, cellsP99Bound)
	}
	if control.ratio() <= cellsP99Bound {
		t.Errorf("the read cannot see a hurt cell b: %s, whose claims were slowed on purpose, reads %.2f× idle (≤ %.1f×)",
			cellsHurt, control.ratio(), cellsP99Bound)
	}

	// The move, and every key: charged at most once; answered → in its tenant's cell now,
	// completed, one payments row, charged exactly once.
	_, movingErrs := tr.window([]string{moving}, after.to, time.Now())
	refused := 0
	for _, err := range movingErrs {
		if errors.Is(err, claim.ErrTenantMoving) {
			refused++
		}
	}
	t.Logf("moved %s a→b: %d keys, %d rows, %d leases revoked, %s in all, frozen for %s; %d of its attempts refused meanwhile (tenant moving), %d other errors",
		moving, res.Keys, sum(res.Counts), res.Revoked, res.Elapsed.Round(time.Millisecond), res.FreezeWindow.Round(time.Millisecond),
		refused, len(movingErrs)-refused)
	if left := keysIn(t, a, moving); len(left) > 0 {
		t.Errorf("cell a still holds %d keys of the moved tenant", len(left))
	}
	where := map[string]*cells.Cell{"acme": a, moving: b, "globex": b, "umbrella": b, cellsHurt: b}
	held := map[string]map[string]keyRow{}
	for tenant, c := range where {
		held[tenant] = keysIn(t, c, tenant)
	}
	var doubles, lost, answered, movedAnswered int
	var problems []string
	tr.mu.Lock()
	for _, req := range tr.requests {
		charges := led.count(claim.DownstreamKey(req.tenant, demo.OperationCharge, req.key))
		r, ok := held[req.tenant][req.key]
		if charges > 1 || r.Payments > 1 {
			doubles++
			problems = append(problems, fmt.Sprintf("%s/%s: %d charges, %d payments rows", req.tenant, req.key, charges, r.Payments))
		}
		if !req.acked {
			continue
		}
		answered++
		if req.tenant == moving {
			movedAnswered++
		}
		if !ok || r.State != claim.StateCompleted || r.Payments != 1 || charges != 1 {
			lost++
			problems = append(problems, fmt.Sprintf("%s/%s answered, but cell %s has %+v (found %v), %d charges", req.tenant, req.key, where[req.tenant].Name, r, ok, charges))
		}
	}
	requests := len(tr.requests)
	tr.mu.Unlock()
	for i, p := range problems {
		if i == 20 {
			t.Errorf("… and %d more", len(problems)-20)
			break
		}
		t.Error(p)
	}
	if movedAnswered == 0 || answered < requests/2 {
		t.Errorf("too little traffic to judge: %d of %d requests answered, %d of them the moved tenant's", answered, requests, movedAnswered)
	}
	if int64(len(held[moving])) < res.Keys {
		t.Errorf("cell b holds %d keys of the moved tenant, the move copied %d", len(held[moving]), res.Keys)
	}
	fmt.Printf("cells: 2 cells, moved tenant: %d keys, %d doubles, %d lost; cell a primary killed: cell b errors %d, p99 %.2f× idle\n",
		res.Keys, doubles, lost, len(bErrs), ratio)
}

// sum adds up a move's per-table counts.
func sum(counts map[string]int64) (n int64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages, for the log beside timings.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
