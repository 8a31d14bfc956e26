// Package chaos runs the demo world as separate processes under a seeded fault schedule, lets it
// settle, checks the invariants a payments team asks about against the store and paysim, and
// writes the report (chaos/report). `idemops chaos` and `make chaos` drive it.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/chaos/report"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/mqlocal"
	"github.com/idemops/idemops/internal/pgha"
)

// What the runner tells the parts it starts (besides DATABASE_URL, AMQP_URL and
// IDEMOPS_DIGEST_SECRET).
const (
	EnvPaysimURL    = "IDEMOPS_CHAOS_PAYSIM_URL"
	EnvAPIKeys      = "IDEMOPS_CHAOS_API_KEYS" // key=tenant,key=tenant
	EnvNotifySecret = "IDEMOPS_CHAOS_NOTIFY_SECRET"
	EnvLedgerURL    = "IDEMOPS_CHAOS_LEDGER_URL" // the runner's non-idempotent ledger
)

// LeaseTTL and Quarantine of the chaos world's claim stores: short, so that a crashed request's
// key is taken over (and the world settles) within seconds rather than a minute.
const (
	LeaseTTL   = 10 * time.Second
	Quarantine = 4 * time.Second
)

// ReconJob is the recon job the console part creates and the runner starts.
const ReconJob = "chaos-stripe"

// LinearizabilityTimeout bounds the history check (keys are checked one by one; a run of a few
// thousand keys takes well under a second).
const LinearizabilityTimeout = 2 * time.Minute

// SettleLimit bounds the wait for the world to settle after traffic stops.
const SettleLimit = 100 * time.Second

// Config is one run.
type Config struct {
	Binary   string // the idemops binary, re-executed as "chaos-part ROLE"
	Duration time.Duration
	Seed     int64
	OutDir   string
	Rate     float64 // new logical payments per second (default 8)
	// HA runs PostgreSQL as the pg_auto_failover set (internal/pgha) and kills its primary once;
	// when the set cannot start (pg_autoctl missing) the run falls back to a single cluster and
	// the report says so.
	HA bool
	// Cells splits the tenants over that many cells (at most MaxCells), each its own PostgreSQL
	// (a pg_auto_failover pair with HA), under a cell map the runner writes; every part then
	// runs with --cells. 0 or 1: one database, no map — the run as before cells.
	Cells int
	Log   io.Writer
}

// world is everything running.
type world struct {
	cfg     Config
	start   time.Time
	db      *gorm.DB     // the control cell's (the only one without cells)
	store   *claim.Store // on db
	pgs     []*cell      // every cell's PostgreSQL; one without cells
	set     *cells.Set   // the runner's own cells (nil without cells)
	broker  *mqlocal.Broker
	proxy   *proxy
	paysim  *proc
	pays    []*proc
	backs   []*backend
	daemons []*proc
	console *proc
	api     consoleAPI
	tokens  []string
	sim     *paysim.Client
	traffic *traffic
	grpc    *grpc.ClientConn
	hist    *history.Recorder
	purge   purger
	ledger  *ledger
	win     window

	brokerBusy atomic.Bool

	mu         sync.Mutex
	anomalies  []anomaly // planted at paysim: findings that must appear
	faults     []report.Fault
	components []report.Component
	bg         sync.WaitGroup // restarts in flight
}

func (w *world) logf(format string, args ...any) {
	fmt.Fprintf(w.cfg.Log, "chaos %6.1fs: %s\n", time.Since(w.start).Seconds(), fmt.Sprintf(format, args...))
}

func (w *world) fault(kind, target, detail string) {
	w.faultAt(time.Now(), kind, target, detail)
}

// faultAt logs a fault that began at t0 (an operator flow is logged when its outcome is known,
// at the time it started).
func (w *world) faultAt(t0 time.Time, kind, target, detail string) {
	f := report.Fault{T: t0.Sub(w.start).Seconds(), Kind: kind, Target: target, Detail: detail}
	w.mu.Lock()
	w.faults = append(w.faults, f)
	w.mu.Unlock()
	w.logf("fault %s (at %.1fs) → %s %s", kind, f.T, target, detail)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs the whole thing and writes the report; an error means the run itself could not be
// made (a part did not start), not that an invariant failed (that is r.Passed false).
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if cfg.Rate == 0 {
		cfg.Rate = 8
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	w := &world{cfg: cfg, start: time.Now()}
	r := &report.Report{Seed: cfg.Seed, Duration: cfg.Duration.String(), StartedAt: w.start.UTC()}
	logs := filepath.Join(cfg.OutDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: --out: %w", err)
	}
	if lf, err := os.Create(filepath.Join(logs, "chaos.log")); err == nil { // the runner's own lines, faults included
		defer lf.Close()
		w.cfg.Log = io.MultiWriter(cfg.Log, lf)
	}
	defer w.teardown()
	if err := w.up(ctx, logs); err != nil {
		return nil, err
	}
	w.logf("world up: payments ×2 behind %s, daemons ×2, console %s, paysim %s", w.proxy.URL, w.api.url, w.sim.BaseURL())
	if w.withCells() {
		for _, c := range w.pgs {
			r.Cells = append(r.Cells, report.Cell{Name: c.name, Tenants: c.tenants})
		}
	}

	// Traffic and faults.
	w.start = time.Now()
	r.StartedAt = w.start.UTC()
	tctx, stopTraffic := context.WithTimeout(ctx, cfg.Duration)
	defer stopTraffic()
	var tw sync.WaitGroup
	tw.Add(1)
	go func() { defer tw.Done(); w.traffic.run(tctx) }()
	tw.Add(1)
	go func() { defer tw.Done(); w.purgeLoop(tctx) }()
	auditMark := w.runSchedule(tctx)
	tw.Wait()
	r.EndedAt = time.Now().UTC()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	w.logf("traffic stopped; waiting for restarts in flight")
	w.bg.Wait()
	n := w.traffic.catchUp(ctx)
	w.logf("client retried %d unfinished keys with their keys", n)

	// Settle, then check.
	invs := w.settle(ctx, auditMark())
	r.SettledAt = time.Now().UTC()
	r.Invariants = invs
	r.Passed = true
	for _, inv := range invs {
		r.Passed = r.Passed && inv.OK
	}
	w.countExecutions(ctx)
	lin := history.Check(w.hist.Operations(), LinearizabilityTimeout, cfg.OutDir)
	w.logf("linearizability (porcupine): %s over %d operations on %d keys in %.1fs", lin.Result, lin.Operations, lin.Partitions, lin.CheckSeconds)
	r.Linearizability = &lin
	r.Passed = r.Passed && lin.Result == report.LinearizableOK
	w.mu.Lock()
	r.Faults = append([]report.Fault(nil), w.faults...)
	sort.SliceStable(r.Faults, func(i, j int) bool { return r.Faults[i].T < r.Faults[j].T })
	for _, f := range w.schedule() {
		r.Schedule = append(r.Schedule, report.Fault{T: f.At.Seconds(), Kind: f.Kind, Target: f.Target})
	}
	r.Components = append([]report.Component(nil), w.components...)
	w.mu.Unlock()
	r.Paths = w.paths(invs)
	walked := cellsWalked(pathsWalked(r.Paths), invs)
	r.Invariants = append(r.Invariants, walked)
	r.Passed = r.Passed && walked.OK
	w.fillSeries(r)
	if err := report.Write(cfg.OutDir, r); err != nil {
		return r, err
	}
	return r, nil
}

// up starts every part; PostgreSQL (every cell's) and RabbitMQ side by side (they are the slow
// ones).
func (w *world) up(ctx context.Context, logs string) error {
	tenants := []string{"acme", "globex"}
	w.pgs = newCells(w.cfg.Cells, tenants)
	var pgErr, mqErr, haErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		haErr, pgErr = w.startPostgres(ctx, logs)
	}()
	go func() {
		defer wg.Done()
		lf, _ := os.Create(filepath.Join(logs, "rabbitmq.log"))
		w.broker, mqErr = mqlocal.Start(ctx, mqlocal.Options{Log: lf, StartTimeout: 3 * time.Minute}) // 6 s idle, over 90 s beside the HA set under load
	}()
	wg.Wait()
	if pgErr != nil {
		return fmt.Errorf("chaos: PostgreSQL: %w", pgErr)
	}
	if mqErr != nil {
		return fmt.Errorf("chaos: RabbitMQ: %w", mqErr)
	}
	switch {
	case w.withCells() && w.haRunning():
		w.logf("PostgreSQL: %d cells, each a pg_auto_failover set (monitor, primary, synchronous standby), and RabbitMQ up (broker in %.1fs)", len(w.pgs), w.broker.StartupTime.Seconds())
		w.components = append(w.components, report.Component{Name: "postgres-ha", Exercised: true,
			Why: fmt.Sprintf("%d cells (%s), each a pg_auto_failover set (internal/pgha): monitor, primary, synchronous standby; one cell's primary is killed once", len(w.pgs), w.cellsText())})
	case w.withCells():
		why := "--ha=false: a single cluster per cell (internal/pglocal); kill-cell-primary is not drawn"
		if haErr != nil {
			why = "the HA sets did not start (" + oneLine(haErr) + "): a single cluster per cell instead; kill-cell-primary is not drawn"
		}
		w.logf("PostgreSQL: %d cells, each a single cluster, and RabbitMQ up (broker in %.1fs)", len(w.pgs), w.broker.StartupTime.Seconds())
		w.components = append(w.components, report.Component{Name: "postgres", Exercised: true, Why: fmt.Sprintf("%d cells (%s), each a single cluster (internal/pglocal)", len(w.pgs), w.cellsText())},
			report.Component{Name: "postgres-ha", Exercised: false, Why: why})
	case w.haRunning():
		w.logf("PostgreSQL HA set (pg_auto_failover: monitor, primary, synchronous standby) and RabbitMQ up (broker in %.1fs)", w.broker.StartupTime.Seconds())
		w.components = append(w.components, report.Component{Name: "postgres-ha", Exercised: true,
			Why: "pg_auto_failover (internal/pgha): monitor, primary, synchronous standby; multi-host URL, target_session_attrs=read-write; the primary is killed once"})
	default:
		why := "--ha=false: a single cluster (internal/pglocal); kill-pg-primary is not drawn"
		if haErr != nil {
			why = "the HA set did not start (" + oneLine(haErr) + "): a single cluster instead; kill-pg-primary is not drawn"
		}
		w.logf("PostgreSQL (single cluster) and RabbitMQ up (broker in %.1fs)", w.broker.StartupTime.Seconds())
		w.components = append(w.components, report.Component{Name: "postgres", Exercised: true, Why: "a single cluster (internal/pglocal)"},
			report.Component{Name: "postgres-ha", Exercised: false, Why: why})
	}
	w.components = append(w.components, report.Component{Name: "rabbitmq", Exercised: true})
	secret := randomHex(24)
	if err := w.openCells(ctx, secret); err != nil {
		return err
	}
	for _, c := range w.pgs {
		if err := shortRetention(ctx, c.db); err != nil {
			return err
		}
	}
	// The runner reads and checks the store directly; every part goes through pgbouncer.
	blog, _ := os.Create(filepath.Join(logs, "pgbouncer.log"))
	for _, c := range w.pgs {
		if err := w.startBouncers(ctx, c, blog); err != nil {
			return err
		}
	}
	w.components = append(w.components, report.Component{Name: "pgbouncer", Exercised: true,
		Why: fmt.Sprintf("transaction pooling, %d server connections per node; the parts connect through it (default_query_exec_mode=exec)", BouncerPoolSize)})
	partsURL := w.pgs[0].partsURL
	var cellsArgs []string // every part but paysim: --cells FILE with cells
	if w.withCells() {
		m, err := w.cellMap(func(c *cell) string { return c.partsURL })
		if err != nil {
			return fmt.Errorf("chaos: cell map: %w", err)
		}
		path := filepath.Join(w.cfg.OutDir, "cells.yaml")
		if err := cells.Write(path, m); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		cellsArgs = []string{"--cells", path}
		w.logf("cell map %s: %s", path, w.cellsText())
	}

	apiKeys := map[string]string{}
	var pairs []string
	for _, t := range tenants {
		k := "sk_chaos_" + t + "_" + randomHex(12)
		apiKeys[t] = k
		pairs = append(pairs, k+"="+t)
	}
	// Replicas listen on ports reserved now, so a restarted one comes back where the proxy looks.
	for i := range 2 {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		gaddr, err := freeAddr()
		if err != nil {
			return err
		}
		u, _ := url.Parse("http://" + addr)
		w.backs = append(w.backs, &backend{name: fmt.Sprintf("payments-%d", i+1), url: u, grpc: gaddr})
	}
	var err error
	if w.proxy, err = startProxy(w.backs); err != nil {
		return err
	}
	if w.ledger, err = startLedger(w.cfg.Seed); err != nil {
		return fmt.Errorf("chaos: ledger: %w", err)
	}
	notify := randomHex(16)
	env := []string{EnvLedgerURL + "=" + w.ledger.url, "DATABASE_URL=" + partsURL, "AMQP_URL=" + w.broker.URL(), "IDEMOPS_DIGEST_SECRET=" + secret,
		EnvAPIKeys + "=" + strings.Join(pairs, ","), EnvNotifySecret + "=" + notify}
	mk := func(name string, args ...string) *proc {
		return &proc{name: name, bin: w.cfg.Binary, args: append([]string{"chaos-part"}, args...), env: env, logs: logs}
	}
	paysimAddr, err := freeAddr()
	if err != nil {
		return err
	}
	consoleAddr, err := freeAddr()
	if err != nil {
		return err
	}
	// Both listen on ports reserved now: killed and restarted, they come back where everyone looks.
	w.paysim = mk("paysim", "paysim", "--addr", paysimAddr, "--seed", fmt.Sprint(w.cfg.Seed), "--state-file", filepath.Join(w.cfg.OutDir, "paysim.json"),
		"--notify-url", w.proxy.URL+"/v1/callbacks/paysim")
	_ = os.Remove(filepath.Join(w.cfg.OutDir, "paysim.json")) // a fresh channel per run
	if err := w.paysim.start(ctx, time.Minute); err != nil {
		return err
	}
	w.sim = paysim.NewClient(w.paysim.ready, &http.Client{Timeout: 10 * time.Second})
	env = append(env, EnvPaysimURL+"="+w.paysim.ready)
	tokens := filepath.Join(w.cfg.OutDir, "logs", "console-tokens")
	for _, b := range w.backs {
		w.pays = append(w.pays, mk(b.name, append([]string{"payments", "--name", b.name, "--addr", b.url.Host, "--grpc-addr", b.grpc}, cellsArgs...)...))
	}
	for i := range 2 {
		w.daemons = append(w.daemons, mk(fmt.Sprintf("daemon-%d", i+1), append([]string{"daemon", "--name", fmt.Sprintf("daemon-%d", i+1)}, cellsArgs...)...))
	}
	w.console = mk("console", append([]string{"console", "--addr", consoleAddr, "--tokens-file", tokens}, cellsArgs...)...)
	all := append(append(append([]*proc{}, w.pays...), w.daemons...), w.console)
	errs := make([]error, len(all))
	var pw sync.WaitGroup
	for i, p := range all {
		pw.Add(1)
		go func() { defer pw.Done(); errs[i] = p.start(ctx, 2*time.Minute) }()
	}
	pw.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	for _, p := range all {
		w.components = append(w.components, report.Component{Name: p.name, Exercised: true})
	}
	w.components = append(w.components, report.Component{Name: "paysim", Exercised: true, Why: "durable (state file, fsync'd before each answer): killed -9 and restarted from it; the outside truth the invariants read"},
		report.Component{Name: "proxy", Exercised: true, Why: "loopback round robin in the runner"})
	b, err := os.ReadFile(tokens)
	if err != nil {
		return err
	}
	w.tokens = strings.Fields(string(b))
	if len(w.tokens) < 2 {
		return fmt.Errorf("chaos: the console wrote %d operator tokens, want 2", len(w.tokens))
	}
	w.api = consoleAPI{url: w.console.ready, hc: &http.Client{Timeout: 60 * time.Second}}
	var grpcAddrs []string
	for _, b := range w.backs {
		grpcAddrs = append(grpcAddrs, b.grpc)
	}
	if w.grpc, err = dialPayments(grpcAddrs); err != nil {
		return fmt.Errorf("chaos: gRPC client: %w", err)
	}
	w.hist = history.NewRecorder()
	w.traffic = newTraffic(w.proxy.URL, apiKeys, tenants, w.cfg.Rate, w.cfg.Seed, w.win.current, w.hist, w.grpc)
	return nil
}

func (w *world) teardown() {
	w.bg.Wait()
	var procs []*proc
	procs = append(procs, w.console)
	procs = append(procs, w.daemons...)
	procs = append(procs, w.pays...)
	var wg sync.WaitGroup
	for _, p := range procs {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
	}
	wg.Wait()
	if w.paysim != nil {
		w.paysim.stop()
	}
	if w.proxy != nil {
		w.proxy.close()
	}
	if w.grpc != nil {
		_ = w.grpc.Close()
	}
	if w.ledger != nil {
		w.ledger.close()
	}
	if w.set != nil {
		w.set.Close() // every cell's pool, the control cell's (w.db) with them
	} else if w.db != nil {
		if s, err := w.db.DB(); err == nil {
			s.Close()
		}
	}
	if w.broker != nil {
		w.broker.Stop()
	}
	var cw sync.WaitGroup
	for _, c := range w.pgs {
		cw.Go(c.stop)
	}
	cw.Wait()
}

// schedule is the run's fault plan: Schedule without cells, ScheduleCells with.
func (w *world) schedule() []PlannedFault {
	return ScheduleCells(w.cfg.Seed, w.cfg.Duration, w.haRunning(), w.cellNames())
}

// runSchedule injects the planned faults at their times until ctx ends. It returns the audit
// heads recorded halfway (each retried for up to a minute: the primary may be failing over
// then), the checkpoints the audit invariant verifies against: by cell name ("" without cells).
func (w *world) runSchedule(ctx context.Context) func() map[string]*audit.Head {
	plan := w.schedule()
	marks := map[string]*audit.Head{}
	var mu sync.Mutex
	var mw sync.WaitGroup
	for _, c := range w.pgs {
		log := audit.New(c.db, w.store.Config().DigestSecret)
		mw.Go(func() {
			select {
			case <-time.After(w.cfg.Duration / 2):
			case <-ctx.Done():
			}
			for range 30 {
				h, err := log.Head(context.WithoutCancel(ctx))
				if err == nil {
					if h.Seq == 0 && c != w.pgs[0] {
						w.logf("audit checkpoint %s(empty, as it must stay: the chain is the control cell's)", prefixed(c.label()))
					} else {
						w.logf("audit checkpoint %s%s", prefixed(c.label()), h)
					}
					mu.Lock()
					marks[c.name] = &h
					mu.Unlock()
					return
				}
				w.logf("audit head %s(retrying): %s", prefixed(c.label()), oneLine(err))
				time.Sleep(2 * time.Second)
			}
		})
	}
	mark := func() map[string]*audit.Head { mw.Wait(); return marks }
	for _, f := range plan {
		t := time.NewTimer(time.Until(w.start.Add(f.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return mark
		case <-t.C:
		}
		w.inject(ctx, f)
	}
	<-ctx.Done()
	return mark
}

// inject runs one fault; the slow ones (restarts, operator flows) in the background.
func (w *world) inject(ctx context.Context, f PlannedFault) {
	switch f.Kind {
	case KindKillService:
		w.killService(ctx, f.Target)
	case KindKillDaemonLeader:
		w.killDaemonLeader(ctx, w.cellNamed(TargetCell(f.Target)))
	case KindKillPGPrimary:
		w.killPGPrimary(ctx, w.pgs[0], KindKillPGPrimary)
	case KindKillCellPrimary:
		w.killPGPrimary(ctx, w.cellNamed(TargetCell(f.Target)), KindKillCellPrimary)
	case KindBrokerRestart:
		if !w.brokerBusy.CompareAndSwap(false, true) { // two restarts at once would kill each other's node
			w.fault(f.Kind, "rabbitmq", "skipped: the previous restart is still under way")
			return
		}
		w.fault(f.Kind, "rabbitmq", "stop and start on the same ports")
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			defer w.brokerBusy.Store(false)
			t0 := time.Now()
			for attempt := 1; ; attempt++ {
				err := w.broker.Restart(context.WithoutCancel(ctx))
				if err == nil {
					w.logf("broker back after %.1fs", time.Since(t0).Seconds())
					return
				}
				w.logf("broker restart %d failed: %v", attempt, err)
				if attempt == 3 {
					return
				}
				time.Sleep(2 * time.Second)
			}
		}()
	case KindKillPaysim:
		w.killPaysim(ctx)
	case KindKillConsole:
		w.killConsole(ctx)
	case KindChannelAnomaly:
		w.bg.Add(1)
		go func() { defer w.bg.Done(); w.channelAnomaly(context.WithoutCancel(ctx)) }()
	case KindOperatorReplay, KindBulkReplay, KindRetentionPurge, KindReconcileRun:
		w.bg.Add(1)
		go func() { defer w.bg.Done(); w.operator(context.WithoutCancel(ctx), f.Kind) }()
	default:
		v := paysimFault(f.Kind)
		w.win.open(v, faultWindow)
		w.fault(f.Kind, "paysim", fmt.Sprintf("X-Paysim-Fault: %s on half the payments started in the next %v", v, faultWindow))
	}
}

// killService is kill -9 of a payments replica while it holds a request (waiting up to 3 s for
// one), then a restart on the same port.
func (w *world) killService(ctx context.Context, target string) {
	var b *backend
	var p *proc
	for i := range w.backs {
		if w.backs[i].name == target {
			b, p = w.backs[i], w.pays[i]
		}
	}
	if b == nil || b.down.Load() || !p.claimCycle() {
		w.fault(KindKillService, target, "skipped: already down or restarting")
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	for b.inflight.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	inflight := b.inflight.Load()
	b.down.Store(true)
	p.kill()
	w.fault(KindKillService, target, fmt.Sprintf("kill -9 with %d request(s) in flight", inflight))
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		defer p.cycling.Store(false)
		t0 := time.Now()
		if err := w.restart(context.WithoutCancel(ctx), p); err != nil {
			return
		}
		b.down.Store(false)
		w.logf("%s back after %.1fs", target, time.Since(t0).Seconds())
	}()
}

// restart starts a killed part again, retrying for up to 3 minutes: it exits at once while
// the database is failing over.
func (w *world) restart(ctx context.Context, p *proc) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := p.start(ctx, time.Until(deadline))
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				w.logf("restart %s: %v", p.name, err)
			}
			return err
		}
		w.logf("restart %s failed, again in 2s: %v", p.name, err)
		time.Sleep(2 * time.Second)
	}
}

// killDaemonLeader finds the replica holding the leader lease (daemon_replicas.is_leader, by
// pid) and kills it with -9, then restarts it. With cells, the leader is cell c's (a daemon
// process runs one replica per cell, so the kill takes the process's other replicas with it).
func (w *world) killDaemonLeader(ctx context.Context, c *cell) {
	if c == nil {
		c = w.pgs[0]
	}
	var rows []struct {
		Name string
		Pid  int
	}
	_ = c.db.WithContext(ctx).Raw(`SELECT r.name, r.pid FROM daemon_replicas r JOIN daemon_leader l ON l.leader_id = r.id
		WHERE l.expires_at > now()`).Scan(&rows).Error
	var p *proc
	for _, row := range rows {
		for _, d := range w.daemons {
			if d.pid() == row.Pid && d.pid() != 0 {
				p = d
			}
		}
	}
	detail := "kill -9 of the leader"
	if p == nil {
		p = w.daemons[0]
		detail = "no live leader found at that moment: kill -9 of daemon-1"
	}
	if c.name != "" {
		detail = c.label() + ": " + detail
	}
	if !p.claimCycle() {
		w.fault(KindKillDaemonLeader, p.name, "skipped: already down or restarting")
		return
	}
	p.kill()
	w.fault(KindKillDaemonLeader, p.name, detail)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		defer p.cycling.Store(false)
		_ = w.restart(context.WithoutCancel(ctx), p)
	}()
}

// killPGPrimary is kill -9 of cell c's HA primary (keeper, postmaster, backends); the standby
// is promoted by the monitor and every part reconnects through the multi-host URL. Without
// cells c is the one HA set (kind kill-pg-primary); with cells the other cells' tenants must
// not notice (kind kill-cell-primary, the fault's target names the cell).
func (w *world) killPGPrimary(ctx context.Context, c *cell, kind string) {
	if c == nil || c.ha == nil {
		w.fault(kind, "postgres", "skipped: no HA set there")
		return
	}
	prefix, node := "", func(n *pgha.Node) string { return n.Name }
	if c.name != "" {
		prefix = c.label() + ": "
		node = func(n *pgha.Node) string { return c.label() + " node " + n.Name }
	}
	primary, err := c.ha.Primary(ctx)
	if err != nil {
		w.fault(kind, prefixed(c.label())+"postgres", "skipped: "+err.Error())
		return
	}
	if err := c.ha.Kill(primary); err != nil {
		w.fault(kind, node(primary), "kill failed: "+err.Error())
		return
	}
	w.fault(kind, node(primary), "kill -9 of the primary's keeper, postmaster and backends")
	t0 := time.Now()
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		n, err := c.ha.WaitPromoted(pctx, primary)
		if err != nil {
			w.logf("failover: %s%v", prefix, err)
			return
		}
		w.logf("failover: %s%s promoted after %.1fs", prefix, n.Name, time.Since(t0).Seconds())
	}()
}

// prefixed is s and a space, or nothing for "".
func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return s + " "
}

func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// percentile of sorted durations, in ms.
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

// fillSeries buckets the client's calls per second and computes the totals.
func (w *world) fillSeries(r *report.Report) {
	w.traffic.mu.Lock()
	ops := append([]op(nil), w.traffic.ops...)
	keys := append([]*keyRecord(nil), w.traffic.keys...)
	w.traffic.mu.Unlock()
	sort.Slice(ops, func(i, j int) bool { return ops[i].end.Before(ops[j].end) })
	r.Totals.FaultsByKind = map[string]int{}
	for _, f := range r.Faults {
		r.Totals.FaultsByKind[f.Kind]++
	}
	var lat []time.Duration
	buckets := map[int]*report.Sample{}
	lats := map[int][]time.Duration{}
	lastOK := w.start
	end := r.EndedAt
	for _, o := range ops {
		sec := int(o.end.Sub(w.start).Seconds())
		s := buckets[sec]
		if s == nil {
			s = &report.Sample{T: float64(sec), Errors: map[string]int{}}
			buckets[sec] = s
		}
		s.Requests++
		r.Totals.Requests++
		lats[sec] = append(lats[sec], o.latency)
		lat = append(lat, o.latency)
		if o.status >= 200 && o.status < 300 {
			s.ClaimsPerSec++
			r.Totals.Answered2xx++
			if o.end.Before(end) {
				if gap := o.end.Sub(lastOK).Seconds(); gap > r.Totals.LongestUnavailableS {
					r.Totals.LongestUnavailableS = gap
				}
				lastOK = o.end
			}
		}
		if o.kind != "" {
			s.Errors[o.kind]++
		}
	}
	if gap := end.Sub(lastOK).Seconds(); gap > r.Totals.LongestUnavailableS && len(keys) > 0 {
		r.Totals.LongestUnavailableS = gap
	}
	last := 0
	for sec := range buckets {
		last = max(last, sec)
	}
	for sec := 0; sec <= last; sec++ { // every second, a quiet one too: an outage shows as zeros
		s := buckets[sec]
		if s == nil {
			s = &report.Sample{T: float64(sec)}
		}
		l := lats[sec]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		s.P50Ms, s.P99Ms = percentile(l, 0.5), percentile(l, 0.99)
		if s.P99Ms > r.Totals.WorstP99Ms {
			r.Totals.WorstP99Ms = s.P99Ms
		}
		if len(s.Errors) == 0 {
			s.Errors = nil
		}
		r.Samples = append(r.Samples, *s)
	}
	r.Totals.LogicalKeys = len(keys)
	for i := range r.Cells { // each cell's tenants' calls alone
		c := &r.Cells[i]
		cl := w.cellNamed(c.Name)
		lastOK := w.start
		for _, o := range ops {
			if cl == nil || !cl.holds(o.tenant) {
				continue
			}
			c.Requests++
			if o.status >= 200 && o.status < 300 {
				c.Answered2xx++
				if o.end.Before(end) {
					c.LongestUnavailableS = max(c.LongestUnavailableS, o.end.Sub(lastOK).Seconds())
					lastOK = o.end
				}
			}
		}
		if c.Requests > 0 {
			c.LongestUnavailableS = max(c.LongestUnavailableS, end.Sub(lastOK).Seconds())
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.Totals.P99Ms = percentile(lat, 0.99)
}

// Summary is the one line printed at the end of a run.
func Summary(r *report.Report, dir string) string {
	ok := 0
	for _, inv := range r.Invariants {
		if inv.OK {
			ok++
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	lin := "not checked"
	if l := r.Linearizability; l != nil {
		lin = fmt.Sprintf("%s over %d operations", l.Result, l.Operations)
	}
	cells := ""
	if len(r.Cells) > 1 {
		cells = fmt.Sprintf(", %d cells", len(r.Cells))
	}
	return fmt.Sprintf("chaos %s: seed %d, %s%s: %d requests (%d 2xx) over %d keys, %d faults, invariants %d/%d, linearizability %s, worst p99 %.0f ms, longest unavailable %.1f s; report %s",
		verdict, r.Seed, r.Duration, cells, r.Totals.Requests, r.Totals.Answered2xx, r.Totals.LogicalKeys, len(r.Faults), ok, len(r.Invariants), lin,
		r.Totals.WorstP99Ms, r.Totals.LongestUnavailableS, filepath.Join(dir, "report.json"))
}
