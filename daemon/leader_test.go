package daemon_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/daemon/daemontest"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// onlyLeader waits for one of ds to signal its election and returns it, checking it is then
// the only leader.
func onlyLeader(t *testing.T, ds ...*daemon.Daemon) *daemon.Daemon {
	t.Helper()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(3 * time.Second))}}
	for _, d := range ds {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.TestSignals().Elected.C())})
	}
	i, _, _ := reflect.Select(cases)
	if i == 0 {
		t.Fatal("no replica elected within 3s")
	}
	leader := ds[i-1]
	for _, d := range ds {
		if d.IsLeader() != (d == leader) {
			t.Fatalf("%s elected, but %s leads: %v", leader.ID(), d.ID(), d.IsLeader())
		}
	}
	return leader
}

func TestLeader_OneReplicaLeadsAndReplicasAreVisible(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := newDaemon(t, open(t, url), "a", nil), newDaemon(t, open(t, url), "b", nil)
	daemontest.Start(t, a)
	daemontest.Start(t, b)
	leader := onlyLeader(t, a, b)

	db := open(t, url)
	ctx := context.Background()
	info, err := daemon.Leader(ctx, db)
	if err != nil || info == nil {
		t.Fatalf("Leader: %v, %v", info, err)
	}
	if info.LeaderID != leader.ID() || info.Expired || info.Term < 1 {
		t.Fatalf("lease %+v, want held by %s", info, leader.ID())
	}
	// Both rows are written by Start; the leader's says so by the time it signals its election.
	rs, err := daemon.Replicas(ctx, db)
	if err != nil || len(rs) != 2 {
		t.Fatalf("Replicas = %+v, %v; want both", rs, err)
	}
	leaders := 0
	for _, r := range rs {
		if r.IsLeader {
			leaders++
			if r.ID != leader.ID() {
				t.Fatalf("replica %s shown as leader, want %s", r.ID, leader.ID())
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("%d replicas shown as leader, want 1", leaders)
	}
	// The two replicas never lead at once, sampled at each of the leader's next 30 polls
	// (20ms apart: a few renewals).
	for range 30 {
		waitPolls(t, leader, 1)
		if a.IsLeader() && b.IsLeader() {
			t.Fatal("both replicas lead")
		}
	}
}

func TestLeader_FailoverWithinOneTTLWhenTheLeaderDies(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dbA := open(t, url)
	a := newDaemon(t, dbA, "a", nil)
	killA := daemontest.Start(t, a)
	onlyLeader(t, a)
	b := newDaemon(t, open(t, url), "b", nil)
	daemontest.Start(t, b)

	db := open(t, url)
	before, _ := daemon.Leader(context.Background(), db)
	killA() // no resignation: b has to wait for the lease to run out
	closeDB(dbA)
	died := time.Now()
	b.TestSignals().Elected.Wait(t, 3*time.Second)
	took := time.Since(died)
	// The lease was renewed at most RenewEvery before the kill, so it lapses within one TTL;
	// b tries again as it runs out.
	// A margin for a loaded test machine; the log shows the figure.
	if took > time.Second+500*time.Millisecond {
		t.Fatalf("failover took %s, want within one TTL (1s)", took)
	}
	t.Logf("failover took %s after the leader died (TTL 1s)", took)
	after, _ := daemon.Leader(context.Background(), db)
	if after.LeaderID != b.ID() || after.Term != before.Term+1 {
		t.Fatalf("lease after failover %+v, before %+v", after, before)
	}
}

func TestLeader_StopResignsSoTheSuccessorNeedNotWaitForTheTTL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a := newDaemon(t, open(t, url), "a", func(c *daemon.Config) { c.LeaseTTL = 10 * time.Second; c.RenewEvery = 200 * time.Millisecond })
	daemontest.Start(t, a)
	onlyLeader(t, a)
	b := newDaemon(t, open(t, url), "b", func(c *daemon.Config) { c.LeaseTTL = 10 * time.Second; c.RenewEvery = 200 * time.Millisecond })
	daemontest.Start(t, b)

	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	b.TestSignals().Elected.Wait(t, 3*time.Second)
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("successor took %s after a resignation, want about one renewal interval", took)
	}
	rs, _ := daemon.Replicas(context.Background(), open(t, url))
	for _, r := range rs {
		if r.ID == a.ID() {
			t.Fatalf("stopped replica %s still listed", a.ID())
		}
	}
}

func TestLeader_StepsDownAsSoonAsARenewalFails(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	// A renewal may take up to RenewEvery before it counts as failed (and steps down for that
	// reason instead): 250ms was too little on a loaded 2-core machine (a renewal timed out in a
	// full run). One second per renewal, a 4s TTL: the point stays "at the next renewal, long
	// before the TTL".
	a := newDaemon(t, open(t, url), "a", func(c *daemon.Config) { c.LeaseTTL = 4 * time.Second; c.RenewEvery = time.Second })
	daemontest.Start(t, a)
	onlyLeader(t, a)

	// Another replica's election (as after a long pause of a): a's term is over.
	pgtest.Exec(t, db, `UPDATE daemon_leader SET leader_id = 'intruder', term = term + 1, expires_at = now() + interval '1 hour'`)
	changed := time.Now()
	if reason := a.TestSignals().SteppedDown.Wait(t, 4*time.Second); reason != "another replica was elected" {
		t.Fatalf("stepped down because %q", reason)
	}
	// At the next renewal (within 1s, plus the renewal itself), well before the 4s TTL.
	if took := time.Since(changed); took > 2500*time.Millisecond {
		t.Fatalf("stepping down took %s, want at the next renewal (1s), before the 4s TTL", took)
	}
}

func TestConfig_ValidatedAtConstruction(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.URL(t))
	cases := []daemon.Config{
		{},
		{DB: db, LeaseTTL: 10 * time.Millisecond},
		{DB: db, LeaseTTL: time.Second, RenewEvery: 900 * time.Millisecond},
		{DB: db, Name: "has space"},
		{DB: db, PollEvery: time.Hour},
	}
	for _, c := range cases {
		if _, err := daemon.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
