package daemon

// The elector: one replica at a time holds the leader lease (daemon_leader); it renews it,
// steps down when a renewal fails, resigns on Stop, and keeps this replica's heartbeat.

import (
	"context"
	"log/slog"
	"os"
	"time"
)

func (d *Daemon) replica(leader bool) Replica {
	host, _ := os.Hostname()
	return Replica{ID: d.id, Name: d.cfg.Name, Host: host, PID: os.Getpid(), IsLeader: leader}
}

// electLoop renews the lease while leading and otherwise tries to get elected.
func (d *Daemon) electLoop(ctx context.Context) {
	defer close(d.elecDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done(): // abrupt: leave the lease to expire
			d.stepDown(d.lead.Load(), "daemon context ended")
			return
		case <-d.stopElec:
			d.resign()
			return
		case <-t.C:
		}
		t.Reset(d.electTick(ctx))
	}
}

// electTick does one renewal or election attempt and says when to do the next.
func (d *Daemon) electTick(ctx context.Context) time.Duration {
	if lead := d.lead.Load(); lead != nil {
		// The renewal must end before the lease could lapse: it gets at most RenewEvery, and
		// RenewEvery is at most half the TTL.
		rctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
		ok, err := renewLease(rctx, d.db, d.id, lead.term, d.cfg.LeaseTTL)
		cancel()
		switch {
		case err != nil:
			d.stepDown(lead, "renewal failed: "+err.Error())
		case !ok:
			d.stepDown(lead, "another replica was elected")
		}
		d.beat(ctx)
		return d.cfg.RenewEvery
	}
	ectx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	term, left, err := tryElect(ectx, d.db, d.id, d.cfg.LeaseTTL)
	cancel()
	if err != nil {
		// One line when the database goes away and one a minute while it stays away, not one
		// per attempt.
		if d.electFailures++; ctx.Err() == nil && (d.electFailures == 1 || time.Since(d.electLogged) > time.Minute) {
			d.electLogged = time.Now()
			d.log.Warn("leader election attempt failed", "err", err, "attempts", d.electFailures)
		}
		return d.cfg.RenewEvery
	}
	d.electFailures = 0
	if term > 0 {
		d.becomeLeader(ctx, term)
		d.beat(ctx)
		return d.cfg.RenewEvery
	}
	d.beat(ctx)
	// Try again as the current lease runs out, so a dead leader is replaced within one TTL.
	return min(max(left+5*time.Millisecond, 10*time.Millisecond), d.cfg.RenewEvery)
}

func (d *Daemon) beat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	defer cancel()
	if err := heartbeat(hctx, d.db, d.replica(d.IsLeader())); err != nil && ctx.Err() == nil {
		d.log.Warn("heartbeat failed", "err", err)
	}
}

func (d *Daemon) becomeLeader(ctx context.Context, term int64) {
	d.lead.Store(&leadership{term: term, lost: make(chan struct{})})
	d.metrics.leader.Set(1)
	d.log.Info("elected leader", "term", term)
	sctx, cancel := context.WithTimeout(ctx, d.cfg.RenewEvery)
	defer cancel()
	if n, err := sweepAbandoned(sctx, d.db, term); err != nil {
		d.log.Warn("abandoned runs not swept", "err", err)
	} else if n > 0 {
		d.log.Info("marked runs left by earlier leaders abandoned", "runs", n)
	}
	_ = pruneReplicas(sctx, d.db)
	d.nudge()
}

// stepDown ends lead here (if it is still current): running jobs are asked to stop after their
// batch; the scheduler starts nothing more under that term.
func (d *Daemon) stepDown(lead *leadership, reason string) {
	if lead == nil || !d.lead.CompareAndSwap(lead, nil) {
		return
	}
	close(lead.lost)
	d.metrics.leader.Set(0)
	level := slog.LevelWarn
	if reason == reasonStopping {
		level = slog.LevelInfo
	}
	d.log.Log(context.Background(), level, "stepped down as leader", "term", lead.term, "reason", reason)
}

const reasonStopping = "stopping"

// resign expires the lease so a successor need not wait, and removes the heartbeat row.
func (d *Daemon) resign() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.base), 5*time.Second)
	defer cancel()
	if lead := d.lead.Load(); lead != nil {
		if err := resignLease(ctx, d.db, d.id, lead.term); err != nil {
			d.log.Warn("resign failed; the lease will expire", "err", err)
		}
		d.stepDown(lead, reasonStopping)
	}
	if err := d.db.WithContext(ctx).Exec(`DELETE FROM daemon_replicas WHERE id = ?`, d.id).Error; err != nil {
		d.log.Warn("heartbeat row not removed", "err", err)
	}
}
