package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/idemclient"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/changes"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/migrations"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	if os.Getenv("PGHA_LOG") == "" {
		slog.SetDefault(quiet) // the payments service logs every simulated crash
	}
	pgtest.Main(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// need fails the test on err; a missing package (pg_auto_failover, pgbouncer) is a failure naming what to install, never a skip.
func need(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// countingTransport counts the charge calls that reach paysim, by Idempotency-Key: a second
// call for one key would mean idemops executed a payment twice (paysim's own dedup, the second
// line of defence, would hide it from the charge count).
type countingTransport struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == "/charges" {
		c.mu.Lock()
		c.calls[r.Header.Get(paysim.HeaderIdempotencyKey)]++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// payment is one logical payment of the traffic: its key, tenant and what the client saw.
type payment struct {
	key, tenant string
	status      int // the client's final answer; 0 when it never got one
	replayed    bool
	crashed     bool // sent first with a simulated crash after the charge
	crashDone   bool // the crash request is over, answered or given up by its client
	// crashAnswered is when the crash request had its answer: its handler has returned, so the
	// attempt it crashed holds any lease granted before then and renews it no more. Zero when
	// its client gave up first.
	crashAnswered time.Time
}

// TestFailover_KillThePrimaryUnderTraffic: demo payments flow through the payments service
// (clients retrying with one key each) and two daemon replicas run against a pg_auto_failover
// set; the primary is killed (-9, keeper and postgres); the monitor promotes the synchronous
// standby. Then: no payment charged twice or executed twice at paysim, no key a client saw
// completed is lost, every key ends completed or failed (replayable), a daemon leader is
// re-elected in a new term, and claims are served again within one lease TTL. The attempts
// crashed on purpose before the kill are let go once claims are served again, their leases moved
// one TTL back, rather than waited out in wall time (see there); -v prints the phases' timeline.
func TestFailover_KillThePrimaryUnderTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL HA set")
	}
	ctx := context.Background()
	phase := timeline(t)
	var log io.Writer
	if os.Getenv("PGHA_LOG") != "" {
		log = os.Stderr
	}
	set, err := pgha.Start(ctx, pgha.Options{Log: log})
	need(t, err)
	phase("HA set started (monitor, primary, synchronous standby)")
	defer set.Stop()
	if err := set.CreateDatabase(ctx, "idemops"); err != nil {
		t.Fatal(err)
	}
	dsn := set.URL("idemops")
	db, err := pgpool.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	if err := migrations.Up(ctx, sqlDB); err != nil {
		t.Fatal(err)
	}
	phase("database created and migrated")

	const leaseTTL = 30 * time.Second // the default
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("failover-test-secret-0123"), Owner: "payments",
		LeaseTTL: leaseTTL, Quarantine: 2 * time.Second, LookupBackoff: 500 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: db, Store: store,
		// 300 ms at the channel keeps a few payments between claim and completion when the
		// primary dies: they must finish by re-reading their key, not wait out their lease.
		Paysim: paysim.Config{Seed: 20, DeclinePayees: []string{"declined-shop"}, Latency: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	counter := &countingTransport{calls: map[string]int{}}
	w.Charge.Client = paysim.NewClient(w.PaysimURL, &http.Client{Timeout: 10 * time.Second, Transport: counter})

	// Two daemon replicas, each with its own pool on the multi-host string, reclaiming every
	// second.
	var daemons []*daemon.Daemon
	for _, name := range []string{"d1", "d2"} {
		ddb, err := pgpool.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		dstore, err := claim.NewStore(ddb, claim.Config{DigestSecret: []byte("failover-test-secret-0123"), Owner: name,
			LeaseTTL: leaseTTL, Quarantine: 2 * time.Second, LookupBackoff: 500 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		d, err := daemon.New(daemon.Config{DB: ddb, Name: name, LeaseTTL: 3 * time.Second, RenewEvery: time.Second,
			PollEvery: 200 * time.Millisecond, ShutdownTimeout: 2 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		reclaim, err := daemon.NewReclaimJob(dstore, demo.Ops{W: w}, daemon.ReclaimConfig{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Register(reclaim, "@every 1s"); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(ctx)
		if err := d.Start(dctx); err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, d)
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = d.Stop(sctx)
			scancel()
			cancel()
			if s, err := ddb.DB(); err == nil {
				s.Close()
			}
		}()
	}
	leaderTerm := func() (int64, bool) {
		info, err := daemon.Leader(ctx, db)
		if err != nil || info == nil || info.Expired {
			return 0, false
		}
		leads := 0
		for _, d := range daemons {
			if d.IsLeader() {
				leads++
			}
		}
		return info.Term, leads == 1
	}
	waitFor(t, 20*time.Second, "a daemon leader", func() bool { _, ok := leaderTerm(); return ok })
	termBefore, _ := leaderTerm()
	phase("world and two daemons started, a leader elected")

	// Traffic: ~8 payments a second, each a logical payment with its own key sent through
	// idemclient (retries with the same key); some sent three times at once, some crashing
	// between the charge and the local commit first, some declined by the channel.
	var killedAt atomic.Int64 // unix ns of the kill; 0 until then
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		payments []*payment
		wg       sync.WaitGroup
		answers  changes.Changes // a payment's client has its final answer
	)
	// completedFrom is a condition on the payments sent from the from-th on: n of them completed
	// (the client saw 201).
	completedFrom := func(from, n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			done := 0
			for _, p := range payments[from:] {
				if p.status == http.StatusCreated {
					done++
				}
			}
			return done >= n
		}
	}
	client := &idemclient.Client{HTTP: &http.Client{Timeout: 20 * time.Second}, MaxAttempts: 40,
		BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}
	tenants := []string{"acme", "globex"}
	go func() {
		rng := rand.New(rand.NewPCG(20, 26))
		tick := time.NewTicker(125 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-trafficCtx.Done():
				return
			case <-tick.C:
			}
			p := &payment{key: fmt.Sprintf("fo-%d-%x", n, rng.Uint32()), tenant: tenants[n%2]}
			payee, scenario := "blue-coffee", rng.IntN(20)
			if scenario == 0 {
				payee = "declined-shop"
			}
			body, _ := json.Marshal(map[string]any{"amount_minor": 100 * (1 + rng.IntN(500)), "currency": "CNY",
				"merchant_order_no": p.key, "payee": payee, "description": "failover test"})
			mu.Lock()
			// Before the kill only (killedAt is stored under mu): a crash between the charge and
			// the local commit, recovered across the failover (by the client's retries or the
			// daemon).
			p.crashed = scenario == 1 && killedAt.Load() == 0
			payments = append(payments, p)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := http.Header{"Authorization": {"Bearer " + w.APIKey(p.tenant)}, "Content-Type": {"application/json"}}
				if p.crashed {
					crash := h.Clone()
					crash.Set("X-Demo-Crash", "after-charge")
					cl := &idemclient.Client{HTTP: client.HTTP, MaxAttempts: 1}
					r, _ := cl.Do(context.Background(), "POST", w.APIURL+"/v1/payments", p.key, crash, body)
					mu.Lock()
					p.crashDone = true
					if r != nil {
						p.crashAnswered = time.Now()
					}
					mu.Unlock()
					answers.Notify()
				}
				copies := 1
				if scenario == 2 || scenario == 3 {
					copies = 3
				}
				var cw sync.WaitGroup
				results := make([]*idemclient.Result, copies)
				for i := range copies {
					cw.Add(1)
					go func() {
						defer cw.Done()
						results[i], _ = client.Do(context.Background(), "POST", w.APIURL+"/v1/payments", p.key, h, body)
					}()
				}
				cw.Wait()
				mu.Lock()
				for _, r := range results {
					if r != nil && (p.status == 0 || r.Response.StatusCode < p.status) {
						p.status, p.replayed = r.Response.StatusCode, r.Replayed
					}
				}
				mu.Unlock()
				answers.Notify()
			}()
		}
	}()

	// A probe claims a fresh key every 100 ms (tenant "probe", released at once). Claims are
	// served again when a claim that started after the old primary was gone succeeds: nothing
	// but a promoted standby can take it. (It used to wait for a claim to fail after the kill
	// first. When the kill landed while the probe was inside a claim or a release, the store's
	// own reconnecting rode the failover out — the release, under context.Background, for up to
	// its 30 s reconnect window — so no claim started after the kill ever failed, and the test
	// timed out waiting although claims were served.)
	var claimsBack atomic.Int64 // ns after the kill; 0 until then
	var probed changes.Changes  // claimsBack set
	var downAt atomic.Int64     // unix ns when the kill had finished: every process of the primary killed
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		tick := time.NewTicker(100 * time.Millisecond) // the probe's cadence
		defer tick.Stop()
		for i := 0; probeCtx.Err() == nil; i++ {
			started := time.Now()
			cctx, cancel := context.WithTimeout(probeCtx, 3*time.Second)
			out, err := store.Claim(cctx, claim.Request{Tenant: "probe", Operation: "probe", Key: fmt.Sprintf("p-%d", i),
				Intent: json.RawMessage(`{}`), Actor: "service:probe"})
			cancel()
			k, d := killedAt.Load(), downAt.Load()
			if err == nil && out.Kind == claim.Acquired {
				if d != 0 && started.UnixNano() > d && claimsBack.Load() == 0 {
					claimsBack.Store(time.Since(time.Unix(0, k)).Nanoseconds())
					probed.Notify()
				}
				// Bounded like the claim: a release cut by the kill re-reads its key for up to the
				// store's reconnect window, and the probe must go on probing meanwhile.
				rctx, rcancel := context.WithTimeout(probeCtx, 3*time.Second)
				_ = store.Release(rctx, out.Lease, "probe")
				rcancel()
			} else if k != 0 && started.UnixNano() > k && os.Getenv("PGHA_LOG") != "" {
				fmt.Fprintf(os.Stderr, "probe %s (+%s): %v %v\n", started.Format("15:04:05.000"), time.Since(started), out, err)
			}
			select {
			case <-probeCtx.Done():
			case <-tick.C:
			}
		}
	}()

	// Traffic on the healthy pair: payments completed before the kill (about 4 s of traffic).
	awaitSignal(t, &answers, 60*time.Second, "24 payments completed before the kill", completedFrom(0, 24))
	phase("24 payments completed on the healthy pair")
	primary, err := set.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What makes a completed key survive: the commit waited for the standby.
	var syncNames, syncState string
	if err := db.Raw(`SELECT current_setting('synchronous_standby_names'),
		COALESCE((SELECT string_agg(sync_state, ',') FROM pg_stat_replication), '')`).Row().Scan(&syncNames, &syncState); err != nil {
		t.Fatal(err)
	}
	if syncNames == "" || (syncState != "quorum" && syncState != "sync") {
		t.Fatalf("replication is not synchronous before the kill: synchronous_standby_names %q, standby %q", syncNames, syncState)
	}
	mu.Lock()
	killedAt.Store(time.Now().UnixNano()) // under mu: no payment sent after this one crashes
	mu.Unlock()
	if err := set.Kill(primary); err != nil {
		t.Fatal(err)
	}
	downAt.Store(time.Now().UnixNano())
	phase("primary killed")
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	promoted, err := set.WaitPromoted(pctx, primary)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	promotedAfter := time.Since(time.Unix(0, killedAt.Load()))
	phase("standby promoted")
	awaitSignal(t, &probed, leaseTTL, "claims served again", func() bool { return claimsBack.Load() != 0 })
	phase("claims served again")

	// Traffic on the new primary: payments sent after claims were served again, completed
	// (about 2 s of traffic, awaited below once the crashed attempts are let go).
	mu.Lock()
	sentAfter := len(payments)
	mu.Unlock()

	// The attempts crashed on purpose before the kill hold leases nobody renews: in production
	// they run out one lease TTL after the crash, and the daemon (or the key's next retry) takes
	// the key over and asks downstream. Leases are judged by the database's now(), which no test
	// clock moves; waiting the ~25 s of wall time left on them proved nothing but the wait, so
	// each crashed attempt's lease is moved one TTL back — its clock advanced, the state it
	// reaches by itself. Only a lease granted before its crash request was answered is moved:
	// that is the crashed attempt's, whose handler has returned (the key's retries start after
	// the answer). Every other key keeps its full 30 s lease, so a key cut by the failover that
	// its holder does not re-read still waits its lease out and is caught taken over below.
	// A crash request whose client gave up first keeps its lease and is waited out.
	awaitSignal(t, &answers, 30*time.Second, "every crash request over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range payments {
			if p.crashed && !p.crashDone {
				return false
			}
		}
		return true
	})
	mu.Lock()
	var crashed []*payment
	for _, p := range payments {
		if p.crashed && !p.crashAnswered.IsZero() {
			crashed = append(crashed, p)
		}
	}
	mu.Unlock()
	var aged int64
	waitFor(t, 10*time.Second, "the crashed attempts' leases moved back", func() bool {
		aged = 0
		return db.Transaction(func(tx *gorm.DB) error {
			for _, p := range crashed {
				res := tx.Exec(`UPDATE idempotency_keys SET lease_expires_at = lease_expires_at - ? * interval '1 millisecond'
					WHERE tenant = ? AND key = ? AND state = 'processing' AND lease_expires_at < ?`,
					leaseTTL.Milliseconds(), p.tenant, p.key, p.crashAnswered.Add(leaseTTL))
				if res.Error != nil {
					return res.Error
				}
				aged += res.RowsAffected
			}
			return nil
		}) == nil
	})
	phase(fmt.Sprintf("the leases of %d crashed attempts (of %d crashed keys) moved one TTL back", aged, len(crashed)))
	awaitSignal(t, &answers, 60*time.Second, "16 payments sent after the failover completed", completedFrom(sentAfter, 16))
	stopTraffic()
	stopProbe()
	<-probeDone
	phase("16 payments completed on the new primary; traffic stopped")

	// Every client gets its final answer (bounded by its retries).
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	select {
	case <-clientsDone:
	case <-time.After(90 * time.Second):
		t.Fatal("clients still waiting for answers 90 s after the traffic stopped")
	}
	phase("every client has its final answer")
	// Keys left processing (crashed attempts, their leases run out) are recovered by the daemon
	// or their retries.
	waitFor(t, 2*leaseTTL, "no key left processing", func() bool {
		var n int64
		return db.Raw(`SELECT count(*) FROM idempotency_keys WHERE state = 'processing' AND tenant <> 'probe'`).
			Scan(&n).Error == nil && n == 0
	})
	phase("no key left processing")
	waitFor(t, 10*time.Second, "a daemon leader in a new term", func() bool {
		term, ok := leaderTerm()
		return ok && term > termBefore
	})
	phase("a daemon leader in a new term")

	// The verdict.
	type row struct {
		Tenant, Key string
		State       claim.State
		Payments    int
		TakenOver   bool
	}
	var rows []row
	if err := db.Raw(`SELECT k.tenant, k.key, k.state, (SELECT count(*) FROM payments p WHERE p.key_id = k.id) AS payments,
		EXISTS (SELECT 1 FROM key_events e WHERE e.key_id = k.id AND e.kind = 'taken_over') AS taken_over
		FROM idempotency_keys k WHERE k.tenant <> 'probe'`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	byKey := map[string]row{}
	for _, r := range rows {
		byKey[r.Tenant+"|"+r.Key] = r
	}
	mu.Lock()
	defer mu.Unlock()
	var doubles, repeated, lost, unfinished, completed, takenOver int
	var problems []string
	for _, p := range payments {
		dk := claim.DownstreamKey(p.tenant, demo.OperationCharge, p.key)
		if n := w.Paysim.ChargeCount(dk); n > 1 {
			doubles++
			problems = append(problems, fmt.Sprintf("%s charged %d times", p.key, n))
		}
		counter.mu.Lock()
		calls := counter.calls[dk]
		counter.mu.Unlock()
		if calls > 1 {
			repeated++
			problems = append(problems, fmt.Sprintf("%s: %d charge calls reached paysim", p.key, calls))
		}
		r, ok := byKey[p.tenant+"|"+p.key]
		history := func() string {
			var evs []string
			db.Raw(`SELECT e.kind || '/' || e.actor || '@' || to_char(e.at, 'HH24:MI:SS.MS') FROM key_history e
				JOIN idempotency_keys k ON k.id = e.key_id WHERE k.tenant = ? AND k.key = ? ORDER BY e.id`, p.tenant, p.key).Scan(&evs)
			return strings.Join(evs, " ")
		}
		if ok && r.TakenOver && !p.crashed {
			takenOver++ // an attempt cut by the failover that waited out its lease instead of re-reading
			problems = append(problems, fmt.Sprintf("%s taken over (kill at %s): %s", p.key,
				time.Unix(0, killedAt.Load()).UTC().Format("15:04:05.000"), history()))
		}
		if p.crashed {
			t.Logf("crashed on purpose, kill at %s: %s ends %s: %s", time.Unix(0, killedAt.Load()).UTC().Format("15:04:05.000"),
				p.key, r.State, history())
		}
		if p.status == http.StatusCreated {
			completed++
			if !ok || r.State != claim.StateCompleted || r.Payments != 1 {
				lost++
				problems = append(problems, fmt.Sprintf("%s: client saw 201, key %+v (found %v)", p.key, r, ok))
			}
		}
		switch {
		case !ok:
			unfinished++
			problems = append(problems, fmt.Sprintf("%s: no key row (client status %d)", p.key, p.status))
		case r.State != claim.StateCompleted && r.State != claim.StateFailedFinal && r.State != claim.StateFailedRetryable:
			unfinished++
			problems = append(problems, fmt.Sprintf("%s: ends %s", p.key, r.State))
		case r.State == claim.StateCompleted && w.Paysim.ChargeCount(dk) != 1:
			doubles++
			problems = append(problems, fmt.Sprintf("%s: completed with %d charges", p.key, w.Paysim.ChargeCount(dk)))
		}
	}
	back := time.Duration(claimsBack.Load())
	t.Logf("primary %s killed; %s promoted after %.1f s; %d of %d payments completed (client saw 201); %d keys not crashed on purpose were taken over",
		primary.Name, promoted.Name, promotedAfter.Seconds(), completed, len(payments), takenOver)
	for i, p := range problems {
		if i == 20 {
			t.Errorf("… and %d more", len(problems)-20)
			break
		}
		t.Error(p)
	}
	if len(payments) < 50 || completed < len(payments)/2 {
		t.Errorf("too little traffic to judge: %d payments, %d completed", len(payments), completed)
	}
	if takenOver > 0 {
		t.Errorf("%d keys cut by the failover were taken over after their lease instead of re-read by their holder", takenOver)
	}
	if doubles+repeated+lost+unfinished > 0 {
		t.Errorf("%d double charges, %d repeated charge calls, %d lost, %d unfinished", doubles, repeated, lost, unfinished)
	}
	if back <= 0 || back > leaseTTL {
		t.Errorf("claims back after %s, want within one lease TTL (%s)", back, leaseTTL)
	}
	fmt.Printf("failover: %d keys, %d double charges, %d lost, claims back after %.1f s\n", len(payments), doubles, lost, back.Seconds())
	phase("verdict")
}

// timeline logs each phase of a test with the time since the start and since the phase before, so
// a -v run shows where the wall time goes; the set's shutdown, the defers' work, is logged too.
func timeline(t *testing.T) func(what string) {
	start := time.Now()
	last := start
	t.Cleanup(func() { t.Logf("%6.1f s (+%4.1f s) stopped", time.Since(start).Seconds(), time.Since(last).Seconds()) })
	return func(what string) {
		now := time.Now()
		t.Logf("%6.1f s (+%4.1f s) %s", now.Sub(start).Seconds(), now.Sub(last).Seconds(), what)
		last = now
	}
}

// awaitSignal waits until cond holds, checking it again at each Notify of c; it fails t after
// limit.
func awaitSignal(t *testing.T, c *changes.Changes, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for {
		next := c.Next() // before the check: a change while it runs is not missed
		if cond() {
			return
		}
		select {
		case <-next:
		case <-timeout.C:
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
	}
}

// waitFor polls cond: what it waits for happens across a failover (a standby promoted, a
// daemon elected on the new primary), and no signal survives the kill of the primary it was
// listened for on.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond) // a poll: no signal survives the kill of the primary (above)
	}
}
