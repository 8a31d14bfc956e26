package daemon

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// leaderScope names the one election every replica takes part in.
const leaderScope = "default"

// leadership is one term of this replica as leader. lost is closed when the term ends here.
type leadership struct {
	term int64
	lost chan struct{}
}

// electSQL makes id the leader when nobody holds an unexpired lease. Concurrent candidates
// serialize on the row lock, and the WHERE is re-checked against the winner's row, so exactly one
// of them gets a term.
const electSQL = `
INSERT INTO daemon_leader AS l (scope, leader_id, term, elected_at, renewed_at, expires_at)
VALUES (?, ?, 1, now(), now(), now() + ? * interval '1 millisecond')
ON CONFLICT (scope) DO UPDATE
SET leader_id = EXCLUDED.leader_id, term = l.term + 1, elected_at = now(), renewed_at = now(),
    expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now()
RETURNING term`

// tryElect returns the new term, or 0 and how long the current lease has left.
func tryElect(ctx context.Context, db *gorm.DB, id string, ttl time.Duration) (int64, time.Duration, error) {
	var terms []int64
	if err := db.WithContext(ctx).Raw(electSQL, leaderScope, id, ttl.Milliseconds()).Scan(&terms).Error; err != nil {
		return 0, 0, fmt.Errorf("elect: %w", err)
	}
	if len(terms) == 1 {
		return terms[0], 0, nil
	}
	var left []int64
	err := db.WithContext(ctx).Raw(`SELECT GREATEST(0, (extract(epoch FROM expires_at - now()) * 1000)::bigint)
		FROM daemon_leader WHERE scope = ?`, leaderScope).Scan(&left).Error
	if err != nil || len(left) == 0 {
		return 0, 0, err
	}
	return 0, time.Duration(left[0]) * time.Millisecond, nil
}

// renewLease extends the lease of term; false means the term is over (someone else was elected).
func renewLease(ctx context.Context, db *gorm.DB, id string, term int64, ttl time.Duration) (bool, error) {
	var terms []int64
	err := db.WithContext(ctx).Raw(`UPDATE daemon_leader SET renewed_at = now(), expires_at = now() + ? * interval '1 millisecond'
		WHERE scope = ? AND leader_id = ? AND term = ? RETURNING term`,
		ttl.Milliseconds(), leaderScope, id, term).Scan(&terms).Error
	if err != nil {
		return false, fmt.Errorf("renew leadership: %w", err)
	}
	return len(terms) == 1, nil
}

// resignLease expires the lease of term now, keeping the term, so a successor need not wait.
func resignLease(ctx context.Context, db *gorm.DB, id string, term int64) error {
	err := db.WithContext(ctx).Exec(`UPDATE daemon_leader SET expires_at = now() - interval '1 millisecond'
		WHERE scope = ? AND leader_id = ? AND term = ?`, leaderScope, id, term).Error
	if err != nil {
		return fmt.Errorf("resign leadership: %w", err)
	}
	return nil
}

// leaderCheckSQL, inside a transaction, holds the lease row (FOR SHARE) while the leader starts
// runs, so a run never starts under a term that has ended.
const leaderCheckSQL = `SELECT term FROM daemon_leader
	WHERE scope = ? AND leader_id = ? AND term = ? AND expires_at > now() FOR SHARE`

// heartbeat records that the replica is alive (and whether it leads).
func heartbeat(ctx context.Context, db *gorm.DB, r Replica) error {
	err := db.WithContext(ctx).Exec(`INSERT INTO daemon_replicas (id, name, host, pid, is_leader) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET last_seen = now(), is_leader = EXCLUDED.is_leader`,
		r.ID, r.Name, r.Host, r.PID, r.IsLeader).Error
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// pruneReplicas forgets replicas not seen for an hour (the leader does it when elected).
func pruneReplicas(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).Exec(`DELETE FROM daemon_replicas WHERE last_seen < now() - interval '1 hour'`).Error
}

// LeaderInfo is the current lease holder.
type LeaderInfo struct {
	LeaderID  string
	Term      int64
	ElectedAt time.Time
	RenewedAt time.Time
	ExpiresAt time.Time
	// Expired: the lease ran out and nobody has been elected since (no leader right now).
	Expired bool
}

// Leader returns the leader lease, or nil when no replica was ever elected.
func Leader(ctx context.Context, db *gorm.DB) (*LeaderInfo, error) {
	var rows []LeaderInfo
	err := db.WithContext(ctx).Raw(`SELECT leader_id, term, elected_at, renewed_at, expires_at, expires_at < now() AS expired
		FROM daemon_leader WHERE scope = ?`, leaderScope).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read leader: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// Replica is one daemon process, as its heartbeat row shows it.
type Replica struct {
	ID        string
	Name      string
	Host      string
	PID       int `gorm:"column:pid"`
	StartedAt time.Time
	LastSeen  time.Time
	// IsLeader: this replica holds the unexpired leader lease.
	IsLeader bool
}

// Replicas lists the replicas seen in the last hour, most recently seen first (at most 100).
// IsLeader comes from the lease itself, not from the replica's last heartbeat.
func Replicas(ctx context.Context, db *gorm.DB) ([]Replica, error) {
	var rows []Replica
	err := db.WithContext(ctx).Raw(`SELECT r.id, r.name, r.host, r.pid, r.started_at, r.last_seen,
		       COALESCE(l.leader_id = r.id AND l.expires_at > now(), false) AS is_leader
		FROM daemon_replicas r LEFT JOIN daemon_leader l ON l.scope = ?
		WHERE r.last_seen > now() - interval '1 hour'
		ORDER BY r.last_seen DESC, r.id LIMIT 100`, leaderScope).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return rows, nil
}

// Installed reports whether the daemon's tables exist (its migrations ran): a console started on
// a database no daemon ever used says so instead of failing on them.
func Installed(ctx context.Context, db *gorm.DB) (bool, error) {
	var present *string
	if err := db.WithContext(ctx).Raw(`SELECT to_regclass('daemon_leader')::text`).Scan(&present).Error; err != nil {
		return false, fmt.Errorf("daemon tables: %w", err)
	}
	return present != nil, nil
}
