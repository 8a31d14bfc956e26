package access

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"gorm.io/gorm"
)

// ThrottleConfig bounds sign-in attempts: after UserLimit failures for one name, or IPLimit from
// one address, within Window, further attempts are refused for Lockout.
type ThrottleConfig struct {
	UserLimit int
	IPLimit   int
	Window    time.Duration
	Lockout   time.Duration
}

// WithDefaults fills the zero fields: 5 failures per name, 20 per address, within 15 minutes, lock
// out for 15 minutes.
func (c ThrottleConfig) WithDefaults() ThrottleConfig {
	if c.UserLimit == 0 {
		c.UserLimit = 5
	}
	if c.IPLimit == 0 {
		c.IPLimit = 20
	}
	if c.Window == 0 {
		c.Window = 15 * time.Minute
	}
	if c.Lockout == 0 {
		c.Lockout = 15 * time.Minute
	}
	return c
}

// Throttle keeps sign-in attempt counts in login_throttle, shared by every console replica.
type Throttle struct {
	db  *gorm.DB
	cfg ThrottleConfig
}

// NewThrottle returns the throttle on db with cfg (zero fields take the defaults).
func NewThrottle(db *gorm.DB, cfg ThrottleConfig) *Throttle {
	return &Throttle{db: db, cfg: cfg.WithDefaults()}
}

// ThrottledError is ErrThrottled with the time left until the lockout ends (for Retry-After).
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string { return ErrThrottled.Error() }
func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// RetryAfterSeconds is the Retry-After value: whole seconds, rounded up, at least 1.
func (e *ThrottledError) RetryAfterSeconds() int {
	s := int(math.Ceil(e.RetryAfter.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// Attempt counts one sign-in attempt for the name and for the address BEFORE the password is
// checked, so parallel attempts cannot all slip past a read-then-count check: each scope's count
// is bumped by one atomic INSERT … ON CONFLICT DO UPDATE … RETURNING, and PostgreSQL's row lock
// serialises concurrent bumps, so within a window at most limit attempts per scope see a count
// ≤ limit and reach the password check. The attempt that takes a count to limit+1 starts the
// lockout (started is true for it alone); attempts during a lockout keep counting but neither
// extend nor restart it. It returns a *ThrottledError when either scope is locked out; the caller
// must then not check the password.
func (t *Throttle) Attempt(ctx context.Context, user, ip string) (started bool, err error) {
	var wait time.Duration
	for _, s := range []struct {
		scope, subject string
		limit          int
	}{{"user", strings.ToLower(user), t.cfg.UserLimit}, {"ip", ip, t.cfg.IPLimit}} {
		if s.subject == "" {
			continue
		}
		// In DO UPDATE, l.* is the row before this attempt: a lockout still running keeps its
		// end; an ended lockout or a window gone by starts a fresh count at 1.
		var rows []struct {
			Failures int
			LeftMS   float64
		}
		err := t.db.WithContext(ctx).Raw(`INSERT INTO login_throttle AS l (scope, subject, failures, first_failure_at)
			VALUES (@scope, @subject, 1, now())
			ON CONFLICT (scope, subject) DO UPDATE SET
				failures = CASE
					WHEN l.locked_until > now() THEN l.failures + 1
					WHEN l.locked_until IS NOT NULL OR l.first_failure_at < now() - @window * interval '1 second' THEN 1
					ELSE l.failures + 1 END,
				first_failure_at = CASE
					WHEN l.locked_until > now() THEN l.first_failure_at
					WHEN l.locked_until IS NOT NULL OR l.first_failure_at < now() - @window * interval '1 second' THEN now()
					ELSE l.first_failure_at END,
				locked_until = CASE
					WHEN l.locked_until > now() THEN l.locked_until
					WHEN l.locked_until IS NULL AND l.first_failure_at >= now() - @window * interval '1 second'
						AND l.failures + 1 > @limit THEN now() + @lockout * interval '1 second'
					END
			-- clock_timestamp, not now(): an attempt that waited on this row's lock began its
			-- transaction before the one that set locked_until, so now() would overstate the wait.
			RETURNING failures, COALESCE(EXTRACT(EPOCH FROM (locked_until - clock_timestamp())) * 1000, 0)::float8 AS left_ms`,
			map[string]any{"scope": s.scope, "subject": s.subject, "limit": s.limit,
				"window": t.cfg.Window.Seconds(), "lockout": t.cfg.Lockout.Seconds()}).Scan(&rows).Error
		if err != nil {
			return false, fmt.Errorf("count sign-in attempt: %w", err)
		}
		if len(rows) != 1 || rows[0].LeftMS <= 0 {
			continue
		}
		if rows[0].Failures == s.limit+1 {
			started = true
		}
		if d := time.Duration(rows[0].LeftMS * float64(time.Millisecond)); d > wait {
			wait = d
		}
	}
	if wait > 0 {
		return started, &ThrottledError{RetryAfter: wait}
	}
	return false, nil
}

// Succeed clears the name's count, and takes this attempt back off the address's count (an
// address counts failures, so an office signing in many times is not locked out by successes).
func (t *Throttle) Succeed(ctx context.Context, user, ip string) error {
	if err := t.db.WithContext(ctx).Exec(`DELETE FROM login_throttle WHERE scope = 'user' AND subject = ?`,
		strings.ToLower(user)).Error; err != nil {
		return fmt.Errorf("clear sign-in count: %w", err)
	}
	if ip == "" {
		return nil
	}
	if err := t.db.WithContext(ctx).Exec(`UPDATE login_throttle SET failures = greatest(failures - 1, 0)
		WHERE scope = 'ip' AND subject = ? AND locked_until IS NULL`, ip).Error; err != nil {
		return fmt.Errorf("clear sign-in count: %w", err)
	}
	return nil
}
