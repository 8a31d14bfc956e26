package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/daemon/daemontest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

const chargeOp = "test.charge"

func newReclaim(t testing.TB, s *claim.Store, o daemon.Operations, cfg daemon.ReclaimConfig) *daemon.ReclaimJob {
	t.Helper()
	cfg.Logger = quiet
	j, err := daemon.NewReclaimJob(s, o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestReclaim_TwoDaemonsNeverTakeOverTheSameKey(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	op := newFakeOp(chargeOp, found)
	var ds []*daemon.Daemon
	for _, name := range []string{"a", "b"} {
		h := open(t, url)
		d := newDaemon(t, h, name, nil)
		j := newReclaim(t, newStore(t, h, name, nil), ops{chargeOp: op}, daemon.ReclaimConfig{BatchSize: 10, Workers: 4})
		if err := d.Register(j, "0 3 * * *"); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	seeder := newStore(t, db, "seeder", nil)

	const rounds, perRound = 4, 125
	took := map[string]int64{}
	for round := range rounds {
		ids := seedExpired(t, seeder, chargeOp, fmt.Sprintf("r%d", round), perRound)
		var total int64
		for attempt := 0; stateCounts(t, db, ids)["processing"] > 0; attempt++ {
			if attempt == 5 {
				t.Fatalf("round %d: keys still processing after %d passes: %v", round, attempt, stateCounts(t, db, ids))
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					run, err := d.RunJob(context.Background(), "reclaim")
					if err != nil || run.Status != daemon.RunSucceeded {
						t.Errorf("round %d: run %+v, %v", round, run, err)
						return
					}
					mu.Lock()
					total += run.Stats["taken_over"]
					took[d.ID()] += run.Stats["taken_over"]
					mu.Unlock()
				}()
			}
			wg.Wait()
		}
		if total != perRound {
			t.Fatalf("round %d: the daemons took over %d keys in all, want %d", round, total, perRound)
		}
		if sc := stateCounts(t, db, ids); sc["completed"] != perRound {
			t.Fatalf("round %d: states %v", round, sc)
		}
		takeovers := eventCounts(t, db, ids, "taken_over")
		recovered := eventCounts(t, db, ids, "recovered_from_downstream")
		for _, id := range ids {
			if takeovers[id] != 1 || recovered[id] != 1 || op.appliedTo(id) != 1 {
				t.Fatalf("round %d: key %d taken over %d times, recovered %d, applied %d; want once each",
					round, id, takeovers[id], recovered[id], op.appliedTo(id))
			}
		}
	}
	var actors []string
	if err := db.Raw(`SELECT DISTINCT actor FROM key_history WHERE kind <> 'claimed'`).Scan(&actors).Error; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(actors, []string{daemon.ReclaimActor}) {
		t.Fatalf("reclaim events by %v, want only %q", actors, daemon.ReclaimActor)
	}
	t.Logf("takeovers per replica: %v", took)
	var hist []struct {
		Kind, Actor, Detail string
	}
	if err := db.Raw(`SELECT kind, actor, detail::text AS detail FROM key_history
		WHERE key_id = (SELECT min(id) FROM idempotency_keys) ORDER BY id`).Scan(&hist).Error; err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		t.Logf("history of one reclaimed key: %-26s %-14s %s", e.Kind, e.Actor, e.Detail)
	}
}

func TestReclaim_LeaderKilledMidBatchLosesNothingAndTheOtherCarriesOn(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	ids := seedExpired(t, newStore(t, db, "seeder", nil), chargeOp, "k", 60)

	dbA := open(t, url)
	opA := newFakeOp(chargeOp, found)
	opA.delay = 100 * time.Millisecond
	opA.looked.Init()
	a := newDaemon(t, dbA, "a", nil)
	if err := a.Register(newReclaim(t, newStore(t, dbA, "a", nil), ops{chargeOp: opA},
		daemon.ReclaimConfig{BatchSize: 20, Workers: 2}), "* * * * * *"); err != nil {
		t.Fatal(err)
	}
	killA := daemontest.Start(t, a)
	onlyLeader(t, a)

	dbB := open(t, url)
	opB := newFakeOp(chargeOp, found)
	b := newDaemon(t, dbB, "b", nil)
	if err := b.Register(newReclaim(t, newStore(t, dbB, "b", nil), ops{chargeOp: opB},
		daemon.ReclaimConfig{BatchSize: 20, Workers: 2}), "* * * * * *"); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, b)

	opA.looked.WaitFor(t, 5*time.Second, "a in the middle of a batch", func(n int64) bool { return n >= 5 })
	killA()
	closeDB(dbA)

	pgtest.Await(t, db, 10*time.Second, "every key completed", func() bool { return stateCounts(t, db, ids)["completed"] == len(ids) },
		"idempotency_keys")
	if !b.IsLeader() {
		t.Fatal("b is not the leader")
	}
	recovered := eventCounts(t, db, ids, "recovered_from_downstream")
	byA, byB := 0, 0
	for _, id := range ids {
		a, b := opA.appliedTo(id), opB.appliedTo(id)
		byA, byB = byA+a, byB+b
		if recovered[id] != 1 || a+b != 1 {
			t.Fatalf("key %d recovered %d times, applied %d+%d; want once", id, recovered[id], a, b)
		}
	}
	if byB == 0 {
		t.Fatal("b reclaimed nothing")
	}
	runs, _ := daemon.ListRuns(context.Background(), db, daemon.RunFilter{Job: "reclaim", Status: daemon.RunAbandoned})
	if len(runs) == 0 || runs[len(runs)-1].Replica != a.ID() {
		t.Fatalf("a's interrupted run not marked abandoned: %+v", runs)
	}
	t.Logf("applied by a: %d, by b: %d", byA, byB)
}

func TestReclaim_EachDownstreamVerdictEndsTheKeyAsTheContractSays(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newStore(t, db, "daemon", nil)
	declined := func(*claim.Lease) (*claim.Document, error) {
		return &claim.Document{ResourceID: "ch_1", Failure: claim.FinalFailure("card_declined", "insufficient funds", nil)}, nil
	}
	missing := func(*claim.Lease) (*claim.Document, error) { return nil, nil }
	flaky := func(*claim.Lease) (*claim.Document, error) { return nil, errors.New("channel timeout") }
	redrive := redriveOp{newFakeOp("op.redrive", missing)}
	registry := ops{
		"op.found":    newFakeOp("op.found", found),
		"op.declined": newFakeOp("op.declined", declined),
		"op.missing":  newFakeOp("op.missing", missing),
		"op.redrive":  redrive,
		"op.flaky":    newFakeOp("op.flaky", flaky),
	}
	keys := map[string]int64{}
	for _, name := range []string{"op.found", "op.declined", "op.missing", "op.redrive", "op.flaky", "op.unknown"} {
		keys[name] = seedExpired(t, s, name, "k", 1)[0]
	}
	job := newReclaim(t, s, registry, daemon.ReclaimConfig{})
	reg := prometheus.NewRegistry()
	for _, c := range job.Collectors() {
		reg.MustRegister(c)
	}

	get := func(name string) *claim.Key {
		k, err := s.Get(context.Background(), keys[name])
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	settled := func() bool {
		return get("op.found").State == claim.StateCompleted && get("op.declined").State == claim.StateFailedFinal &&
			get("op.missing").State == claim.StateFailedRetryable && get("op.redrive").State == claim.StateCompleted &&
			get("op.flaky").NeedsAttention && get("op.unknown").NeedsAttention
	}
	total := daemon.Stats{}
	for pass := 0; !settled(); pass++ {
		if pass == 100 {
			t.Fatalf("not settled after %d passes; stats %v", pass, total)
		}
		stats, err := job.RunOnce(context.Background(), nil, daemon.NopProgress{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range stats {
			total[k] += v
		}
		// A key parked after a lookup holds a lease until its next look: the next pass is due then.
		pgtest.SleepUntil(t, db, `SELECT min(lease_expires_at) FROM idempotency_keys WHERE state = 'processing'`)
	}
	for k, want := range map[string]int64{"recovered": 1, "failed_final": 1, "failed_retryable": 1, "redriven": 1, "not_found": 2} {
		if total[k] != want {
			t.Errorf("stats[%s] = %d, want %d (all: %v)", k, total[k], want, total)
		}
	}
	if total["lookup_error"] < 3 || total["unknown_operation"] < 3 {
		t.Errorf("stats %v: want at least 3 lookup errors and 3 unknown-operation parks", total)
	}
	if n := redrive.exec[keys["op.redrive"]]; n != 1 {
		t.Fatalf("redrive executed %d times, want once", n)
	}
	if k := get("op.declined"); deref(k.ErrorCode) != "card_declined" {
		t.Fatalf("declined key error %q", deref(k.ErrorCode))
	}

	hist, err := s.History(context.Background(), keys["op.missing"], 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range hist {
		kinds = append(kinds, e.Kind)
		if e.Kind != "claimed" && e.Actor != daemon.ReclaimActor {
			t.Fatalf("event %s by %s", e.Kind, e.Actor)
		}
	}
	if want := []string{"claimed", "taken_over", "downstream_not_found", "taken_over", "failed"}; !slices.Equal(kinds, want) {
		t.Fatalf("history of the missing key %v, want %v", kinds, want)
	}
	hist, _ = s.History(context.Background(), keys["op.unknown"], 0)
	if last := hist[len(hist)-1]; last.Kind != "lookup_failed" || !strings.Contains(string(last.Detail), "not registered") {
		t.Fatalf("unknown operation's last event %s %s", last.Kind, last.Detail)
	}

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "idemops_reclaim_keys_needing_attention" && mf.GetMetric()[0].GetGauge().GetValue() != 2 {
			t.Fatalf("keys needing attention gauge %v, want 2", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

func TestReclaimConfig_ValidatedAtConstructionAndInParams(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newStore(t, db, "daemon", nil)
	for _, cfg := range []daemon.ReclaimConfig{{BatchSize: 20000}, {Workers: 100}, {MaxPerRun: -1}} {
		if _, err := daemon.NewReclaimJob(s, daemon.NoOperations{}, cfg); !errors.Is(err, daemon.ErrInvalidConfig) {
			t.Errorf("NewReclaimJob(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	j := newReclaim(t, s, daemon.NoOperations{}, daemon.ReclaimConfig{})
	for _, params := range []string{`{"batch_size": 0}`, `{"bogus": 1}`, `[]`} {
		if _, err := j.RunOnce(context.Background(), []byte(params), daemon.NopProgress{}); !errors.Is(err, daemon.ErrInvalidConfig) {
			t.Errorf("params %s: %v, want ErrInvalidConfig", params, err)
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
