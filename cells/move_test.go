package cells_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/changes"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// moveWorld is two cells (a: acme, initech; b: globex) with keys of acme in a: completed ones
// (with answers), a failed one (with its events), one a holder still works on.
type moveWorld struct {
	t    *testing.T
	path string
	set  *cells.Set
	a, b *cells.Cell
	held *claim.Lease
	// sums are acme's rows in a before the move, per table: count and md5 over the rows.
	sums map[string]string
	// steps hears each step the move finishes (a fence is set at one step, switched at another).
	steps changes.Changes
}

func newMoveWorld(t *testing.T) *moveWorld {
	t.Helper()
	t.Parallel()
	w := &moveWorld{t: t, path: twoCells(t)}
	w.set = open(t, w.path)
	w.a, _ = w.set.Cell("a")
	w.b, _ = w.set.Cell("b")
	ctx := context.Background()
	for i := range 5 {
		for _, tenant := range []string{"acme", "initech"} {
			out := w.claim(w.a, tenant, fmt.Sprintf("done-%d", i))
			if err := w.a.Store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	failed := w.claim(w.a, "acme", "failed")
	if err := w.a.Store.Fail(ctx, nil, failed.Lease, claim.RetryableFailure("timeout", "downstream timed out")); err != nil {
		t.Fatal(err)
	}
	w.held = w.claim(w.a, "acme", "held").Lease
	pgtest.Exec(t, w.a.DB, `INSERT INTO consumed_messages (consumer, business_key, message_id, tenant) VALUES ('c', 'b1', 'm1', 'acme')`)
	w.sums = w.rowSums(w.a)
	return w
}

func (w *moveWorld) claim(c *cells.Cell, tenant, key string) *claim.Outcome {
	w.t.Helper()
	out, err := c.Store.Claim(context.Background(), claim.Request{Tenant: tenant, Operation: "charge", Key: key,
		Intent: []byte(`{"amount":1}`), Actor: "service:test"})
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// rowSums is acme's rows per table in cell c (the held key's lease columns left out: the move
// revokes it).
func (w *moveWorld) rowSums(c *cells.Cell) map[string]string {
	w.t.Helper()
	out := map[string]string{}
	for table, q := range map[string]string{
		"idempotency_keys":  `SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', id, key, state, request, response_day, resource_id, version - CASE WHEN key = 'held' THEN version ELSE 0 END), ',' ORDER BY id)) FROM idempotency_keys WHERE tenant = 'acme'`,
		"key_events":        `SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', id, key_id, kind, detail), ',' ORDER BY id)) FROM key_events WHERE key_id IN (SELECT id FROM idempotency_keys WHERE tenant = 'acme')`,
		"key_responses":     `SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', key_id, day, status, body), ',' ORDER BY key_id)) FROM key_responses WHERE key_id IN (SELECT id FROM idempotency_keys WHERE tenant = 'acme')`,
		"consumed_messages": `SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', consumer, business_key, message_id), ',')) FROM consumed_messages WHERE tenant = 'acme'`,
	} {
		var s string
		if err := c.DB.Raw(q).Scan(&s).Error; err != nil {
			w.t.Fatalf("%s: %v", table, err)
		}
		out[table] = s
	}
	return out
}

func (w *moveWorld) move(stopAfter cells.Step) (*cells.MoveResult, error) {
	m, err := cells.Load(w.path)
	if err != nil {
		w.t.Fatal(err)
	}
	return cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: "acme", To: "b", Audit: auditIn("acme"),
		DrainTimeout: 50 * time.Millisecond, StopAfter: stopAfter, Progress: &w.steps})
}

// checkMoved checks the end state of acme's move from a to b.
func (w *moveWorld) checkMoved(res *cells.MoveResult) {
	t := w.t
	t.Helper()
	ctx := context.Background()
	if got := w.rowSums(w.b); fmt.Sprint(got) != fmt.Sprint(w.sums) {
		t.Fatalf("acme's rows in b:\n%v\nwant those a had:\n%v", got, w.sums)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme'`) +
		count(t, w.a.DB, `SELECT count(*) FROM consumed_messages WHERE tenant = 'acme'`); n != 0 {
		t.Fatalf("%d rows of acme left in a", n)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'initech'`); n != 5 {
		t.Fatalf("initech's keys in a: %d, want 5", n)
	}
	if res != nil && (res.Keys != 7 || res.From != "a" || res.To != "b" || res.FreezeWindow <= 0 || res.Elapsed < res.FreezeWindow) {
		t.Fatalf("result %+v", res)
	}
	m, err := cells.Load(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := m.CellOf("acme"); c != "b" {
		t.Fatalf("the map puts acme in %q", c)
	}
	// a refuses acme for good, naming b; b serves it: its completed keys replay there.
	_, err = w.a.Store.Claim(ctx, claim.Request{Tenant: "acme", Operation: "charge", Key: "new", Intent: []byte(`{"amount":1}`)})
	var me *claim.TenantMovingError
	if !errors.As(err, &me) || me.State != claim.FenceGone || me.MovedTo != "b" {
		t.Fatalf("a claim for acme in a: %v, want gone to b", err)
	}
	if out := w.claim(w.b, "acme", "done-3"); out.Kind != claim.Replay || string(out.Snapshot.Body) != `{"n":3}` {
		t.Fatalf("replay in b: %+v", out)
	}
	if out := w.claim(w.b, "acme", "new"); out.Kind != claim.Acquired || out.KeyID>>40 != 2 {
		t.Fatalf("new key in b: %+v (id %d, want b's range)", out, out.KeyID)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM audit_log WHERE action = 'cells.move' AND target = 'acme'`); n != 1 {
		t.Fatalf("%d audit rows of the move, want 1", n)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM cell_moves WHERE tenant = 'acme' AND step = 'done' AND finished_at IS NOT NULL`); n != 1 {
		t.Fatalf("%d finished moves recorded, want 1", n)
	}
}

// A move copies every row of the tenant with its id, switches the map, leaves the source
// refusing the tenant (naming the target), and audits itself once. The lease a holder kept past
// the wait is revoked: the holder's completion changes nothing, and the target's reclaimer takes
// the key over.
func TestMove_MovesTheTenantsRowsAndSwitches(t *testing.T) {
	w := newMoveWorld(t)
	m, err := cells.Load(w.path)
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	res, err := cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: "acme", To: "b", Audit: auditIn("acme"),
		DrainTimeout: 50 * time.Millisecond, Moved: func(_ context.Context, from, to string) error { moved = append(moved, from+">"+to); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	w.checkMoved(res)
	if fmt.Sprint(moved) != "[a>b]" {
		t.Fatalf("Moved ran %v, want once a>b", moved)
	}
	if res.Revoked != 1 {
		t.Fatalf("revoked %d leases, want the held one", res.Revoked)
	}
	ctx := context.Background()
	if err := w.a.Store.Complete(ctx, nil, w.held, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("the revoked holder's completion: %v, want lease lost", err)
	}
	leases, err := w.b.Store.TakeoverExpired(ctx, 10, "daemon")
	if err != nil || len(leases) != 1 || leases[0].KeyID != w.held.KeyID || !leases[0].MustCheckDownstream() {
		t.Fatalf("b's reclaimer took over %v (%v), want the held key %d with a lookup first", leases, err, w.held.KeyID)
	}
	if n := count(t, w.b.DB, `SELECT count(*) FROM cell_fences`); n != 0 {
		t.Fatalf("b still fences %d tenants", n)
	}
}

// A move stopped after any step (a crash) is finished by running the same command again, with
// the same end state as a move that never stopped.
func TestMove_ContinuesAfterAStopAtEveryStep(t *testing.T) {
	for _, step := range []cells.Step{cells.StepRecorded, cells.StepFenced, cells.StepDrained, cells.StepCopied, cells.StepVerified, cells.StepSwitched} {
		t.Run(string(step), func(t *testing.T) {
			w := newMoveWorld(t)
			if _, err := w.move(step); !errors.Is(err, cells.ErrStopped) {
				t.Fatalf("stop after %s: %v", step, err)
			}
			res, err := w.move("")
			if err != nil {
				t.Fatal(err)
			}
			w.checkMoved(res)
		})
	}
}

// A move is refused, changing nothing, for a tenant or cell the map does not have, the tenant's
// own cell, and while the tenant's move to another cell is under way.
func TestMove_RefusesWhatCannotBeDone(t *testing.T) {
	w := newMoveWorld(t)
	m, err := cells.Load(w.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tenant, to, want string }{
		{"nobody", "b", `tenant "nobody" is in no cell`},
		{"acme", "zz", `no cell "zz"`},
		{"acme", "a", `in cell a already`},
	} {
		_, err := cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: c.tenant, To: c.to})
		if !errors.Is(err, cells.ErrMoveRefused) || errs.Exit(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("move %s to %s: %v (exit %d), want a refusal saying %q", c.tenant, c.to, err, errs.Exit(err), c.want)
		}
	}
	if _, err := w.move(cells.StepFenced); !errors.Is(err, cells.ErrStopped) {
		t.Fatal(err)
	}
	_, err = cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: "acme", To: "a"})
	if !errors.Is(err, cells.ErrMoveRefused) || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("a second move while one is under way: %v", err)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM cell_moves`); n != 1 {
		t.Fatalf("%d moves recorded, want the one under way", n)
	}
	// Another run of the same move while one runs (its lock held in the control cell).
	sqlDB, err := w.a.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	held, err := sqlDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.ExecContext(context.Background(), `SELECT pg_advisory_lock(hashtext('idemops cell move'), hashtext('acme'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.move(""); !errors.Is(err, cells.ErrMoveRefused) || !strings.Contains(err.Error(), "another run") {
		t.Fatalf("a second run at once: %v", err)
	}
}

// TestMove_UnderTrafficNoKeyIsLostOrDoubled: clients keep claiming and completing acme's keys
// while the tenant moves, following the fence (frozen: retry; gone: re-read the map, go to the
// cell it names). Every key a client executed exists once, in b, completed — none lost, none
// executed twice —, and a never saw a key of acme written after its freeze.
func TestMove_UnderTrafficNoKeyIsLostOrDoubled(t *testing.T) {
	w := newMoveWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type done struct {
		key      string
		executes int
	}
	downstream := &docs{m: map[string]bool{}}
	results := make(chan []done, 4)
	moved := make(chan struct{})
	var waits atomic.Int64 // refusals that waited for the move's next step
	for worker := range 4 {
		go func() {
			var out []done
			cell := w.a
			afterMove := 0
			for i := 0; afterMove < 20; i++ {
				key := fmt.Sprintf("traffic-%d-%d", worker, i)
				executes := 0
				for attempt := 0; ; attempt++ {
					if attempt > 100 {
						t.Errorf("%s: no answer after %d attempts", key, attempt)
						results <- out
						return
					}
					// What can change a refusal is the move's next step: the client's Retry-After
					// is a wait for it (the move done, no step comes: retried at once).
					step := w.steps.Next()
					afterStep := func() {
						waits.Add(1)
						select {
						case <-step:
						case <-moved:
						}
					}
					o, err := cell.Store.Claim(ctx, claim.Request{Tenant: "acme", Operation: "charge", Key: key, Intent: []byte(`{"amount":1}`), Actor: "service:test"})
					var me *claim.TenantMovingError
					switch {
					case errors.As(err, &me) && me.State == claim.FenceGone:
						c, _ := w.set.Cell(me.MovedTo) // the refusal names the new cell: re-route
						cell = c
						continue
					case errors.As(err, &me):
						afterStep() // frozen until the switch
						continue
					case err != nil:
						t.Errorf("%s: %v", key, err)
						results <- out
						return
					case o.Kind == claim.Replay:
					case o.Kind == claim.Acquired:
						// A takeover looks downstream up first (Run does): the document an
						// earlier attempt made is applied, not made again.
						if !o.Lease.MustCheckDownstream() || !downstream.has(key) {
							executes++
							downstream.add(key)
						}
						if err := cell.Store.Complete(ctx, nil, o.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil && !errors.Is(err, claim.ErrLeaseLost) {
							t.Errorf("%s: complete: %v", key, err)
						}
						if err != nil {
							continue // revoked by the move: the new cell's reclaimer finishes it (below)
						}
					default: // held by a lease the move's drain revokes
						afterStep()
						continue
					}
					break
				}
				out = append(out, done{key, executes})
				select {
				case <-moved:
					afterMove++
				default:
				}
			}
			results <- out
		}()
	}
	res, err := w.move("")
	close(moved)
	if err != nil {
		t.Fatal(err)
	}
	var all []done
	for range 4 {
		all = append(all, <-results...)
	}
	if t.Failed() {
		return
	}
	// Leases the move revoked are taken over in b, where downstream already has the document
	// (the first attempt executed): completed without executing again.
	leases, err := w.b.Store.TakeoverExpired(context.Background(), 100, "daemon")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if err := w.b.Store.Complete(context.Background(), nil, l, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range all {
		if d.executes > 1 {
			t.Errorf("%s executed %d times", d.key, d.executes)
		}
		if n := count(t, w.b.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme' AND key = ? AND state = 'completed'`, d.key); n != 1 {
			t.Errorf("%s: %d completed rows in b, want 1", d.key, n)
		}
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme'`); n != 0 {
		t.Errorf("%d keys of acme left in a", n)
	}
	t.Logf("%d keys claimed by 4 clients during the move (%d moved, %d revoked, freeze window %s; %d refusals waited for the move's next step)",
		len(all), res.Keys, res.Revoked, res.FreezeWindow, waits.Load())
}

// docs is a downstream in memory: the keys whose document exists.
type docs struct {
	mu sync.Mutex
	m  map[string]bool
}

func (d *docs) add(key string) { d.mu.Lock(); d.m[key] = true; d.mu.Unlock() }
func (d *docs) has(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[key]
}

// A move given up before its switch leaves the tenant in its cell, served, with nothing of it in
// the target; one past its switch cannot be given up.
func TestMove_AbortBeforeTheSwitchLeavesTheTenantHome(t *testing.T) {
	w := newMoveWorld(t)
	if _, err := w.move(cells.StepCopied); !errors.Is(err, cells.ErrStopped) {
		t.Fatal(err)
	}
	m, err := cells.Load(w.path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cells.MoveConfig{Map: m, Tenant: "acme", Audit: auditIn("acme")}
	if err := cells.AbortMove(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if n := count(t, w.b.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme'`) + count(t, w.a.DB, `SELECT count(*) FROM cell_fences`) +
		count(t, w.b.DB, `SELECT count(*) FROM cell_fences`); n != 0 {
		t.Fatalf("%d rows or fences left after the abort", n)
	}
	if out := w.claim(w.a, "acme", "after-abort"); out.Kind != claim.Acquired {
		t.Fatalf("a claim of acme in a after the abort: %+v", out)
	}
	if err := cells.AbortMove(context.Background(), cfg); !errors.Is(err, cells.ErrMoveRefused) {
		t.Fatalf("a second abort: %v", err)
	}
	// After the switch: no abort.
	if _, err := w.move(cells.StepSwitched); !errors.Is(err, cells.ErrStopped) {
		t.Fatal(err)
	}
	if err := cells.AbortMove(context.Background(), cfg); !errors.Is(err, cells.ErrMoveRefused) || !strings.Contains(err.Error(), "past its switch") {
		t.Fatalf("abort after the switch: %v", err)
	}
}

// Databases that held keys before they were cells may share ids: such a move is refused before
// anything is fenced.
func TestMove_RefusedWhenTheTargetHoldsTheTenantsIDs(t *testing.T) {
	w := newMoveWorld(t)
	var id int64
	if err := w.a.DB.Raw(`SELECT min(id) FROM idempotency_keys WHERE tenant = 'acme'`).Scan(&id).Error; err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, w.b.DB, `INSERT INTO idempotency_keys (id, tenant, operation, key, key_digest, fingerprint, fingerprint_version,
		request, state, downstream_key) OVERRIDING SYSTEM VALUE VALUES (?, 'globex', 'op', 'k', 'd', 'f', 1, '{}', 'failed_retryable', 'dk')`, id)
	if _, err := w.move(""); !errors.Is(err, cells.ErrMoveRefused) || !strings.Contains(err.Error(), "before they were cells") {
		t.Fatalf("move onto taken ids: %v", err)
	}
	if n := count(t, w.a.DB, `SELECT count(*) FROM cell_fences`); n != 0 {
		t.Fatalf("the refused move fenced the tenant")
	}
}

// auditIn records a move's audit rows as the CLI does.
func auditIn(tenant string) func(ctx context.Context, tx *gorm.DB, action string, detail map[string]any) error {
	return func(ctx context.Context, tx *gorm.DB, action string, detail map[string]any) error {
		return audit.New(tx, secret).Append(ctx, tx, audit.Entry{Actor: "operator:test", Action: action, Target: tenant,
			Tenants: []string{tenant}, Detail: detail})
	}
}
