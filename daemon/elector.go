package daemon

// The elector: one replica at a time holds the leader lease (daemon_leader); it renews it,
// steps down when a renewal fails, resigns on Stop, and keeps this replica's heartbeat.

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// elector holds, renews and resigns this replica's leader lease and keeps its heartbeat.
type elector struct {
	cfg     Config
	db      *gorm.DB
	id      string
	log     *slog.Logger
	metrics *metrics
	signals *testSignals
	elected func() // called once elected (the scheduler's nudge)

	lead     atomic.Pointer[leadership]
	failures int // owned by run
	logged   time.Time

	base       context.Context
	stop, done chan struct{}
}

// current is the leadership held now, nil while following.
func (e *elector) current() *leadership { return e.lead.Load() }

func (e *elector) replica(leader bool) Replica {
	host, _ := os.Hostname()
	return Replica{ID: e.id, Name: e.cfg.Name, Host: host, PID: os.Getpid(), IsLeader: leader}
}

// run renews the lease while leading and otherwise tries to get elected.
func (e *elector) run(ctx context.Context) {
	defer close(e.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done(): // abrupt: leave the lease to expire
			e.stepDown(e.lead.Load(), "daemon context ended")
			return
		case <-e.stop:
			e.resign()
			return
		case <-t.C:
		}
		t.Reset(e.tick(ctx))
	}
}

// tick does one renewal or election attempt and says when to do the next.
func (e *elector) tick(ctx context.Context) time.Duration {
	if lead := e.lead.Load(); lead != nil {
		// The renewal must end before the lease could lapse: it gets at most RenewEvery, and
		// RenewEvery is at most half the TTL.
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RenewEvery)
		ok, err := renewLease(rctx, e.db, e.id, lead.term, e.cfg.LeaseTTL)
		cancel()
		switch {
		case err != nil:
			e.stepDown(lead, "renewal failed: "+err.Error())
		case !ok:
			e.stepDown(lead, "another replica was elected")
		}
		e.beat(ctx)
		return e.cfg.RenewEvery
	}
	ectx, cancel := context.WithTimeout(ctx, e.cfg.RenewEvery)
	term, left, err := tryElect(ectx, e.db, e.id, e.cfg.LeaseTTL)
	cancel()
	if err != nil {
		// One line when the database goes away and one a minute while it stays away, not one
		// per attempt.
		if e.failures++; ctx.Err() == nil && (e.failures == 1 || time.Since(e.logged) > time.Minute) {
			e.logged = time.Now()
			e.log.Warn("leader election attempt failed", "err", err, "attempts", e.failures)
		}
		return e.cfg.RenewEvery
	}
	e.failures = 0
	if term > 0 {
		e.becomeLeader(ctx, term)
		e.beat(ctx)
		e.signals.Elected.Signal(term) // after the heartbeat, which now says so
		return e.cfg.RenewEvery
	}
	e.beat(ctx)
	// Try again as the current lease runs out, so a dead leader is replaced within one TTL.
	return min(max(left+5*time.Millisecond, 10*time.Millisecond), e.cfg.RenewEvery)
}

func (e *elector) beat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, e.cfg.RenewEvery)
	defer cancel()
	if err := heartbeat(hctx, e.db, e.replica(e.current() != nil)); err != nil && ctx.Err() == nil {
		e.log.Warn("heartbeat failed", "err", err)
	}
}

func (e *elector) becomeLeader(ctx context.Context, term int64) {
	e.lead.Store(&leadership{term: term, lost: make(chan struct{})})
	e.metrics.leader.Set(1)
	e.log.Info("elected leader", "term", term)
	sctx, cancel := context.WithTimeout(ctx, e.cfg.RenewEvery)
	defer cancel()
	if n, err := sweepAbandoned(sctx, e.db, term); err != nil {
		e.log.Warn("abandoned runs not swept", "err", err)
	} else if n > 0 {
		e.log.Info("marked runs left by earlier leaders abandoned", "runs", n)
	}
	_ = pruneReplicas(sctx, e.db)
	e.elected()
}

// stepDown ends lead here (if it is still current): running jobs are asked to stop after their
// batch; the scheduler starts nothing more under that term.
func (e *elector) stepDown(lead *leadership, reason string) {
	if lead == nil || !e.lead.CompareAndSwap(lead, nil) {
		return
	}
	close(lead.lost)
	e.metrics.leader.Set(0)
	level := slog.LevelWarn
	if reason == reasonStopping {
		level = slog.LevelInfo
	}
	e.log.Log(context.Background(), level, "stepped down as leader", "term", lead.term, "reason", reason)
	e.signals.SteppedDown.Signal(reason)
}

const reasonStopping = "stopping"

// resign expires the lease so a successor need not wait, and removes the heartbeat row.
func (e *elector) resign() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.base), 5*time.Second)
	defer cancel()
	if lead := e.lead.Load(); lead != nil {
		if err := resignLease(ctx, e.db, e.id, lead.term); err != nil {
			e.log.Warn("resign failed; the lease will expire", "err", err)
		}
		e.stepDown(lead, reasonStopping)
	}
	if err := e.db.WithContext(ctx).Exec(`DELETE FROM daemon_replicas WHERE id = ?`, e.id).Error; err != nil {
		e.log.Warn("heartbeat row not removed", "err", err)
	}
}
