package console

import (
	"context"
	"fmt"
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

func (c ThrottleConfig) withDefaults() ThrottleConfig {
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

// throttle keeps failure counts in login_throttle, shared by every console replica.
type throttle struct {
	db  *gorm.DB
	cfg ThrottleConfig
}

// check returns ErrThrottled when the name or the address is locked out.
func (t *throttle) check(ctx context.Context, user, ip string) error {
	var n int64
	err := t.db.WithContext(ctx).Raw(`SELECT count(*) FROM login_throttle
		WHERE ((scope = 'user' AND subject = ?) OR (scope = 'ip' AND subject = ?)) AND locked_until > now()`,
		strings.ToLower(user), ip).Scan(&n).Error
	if err != nil {
		return fmt.Errorf("check throttle: %w", err)
	}
	if n > 0 {
		return ErrThrottled
	}
	return nil
}

// fail counts a failed attempt for the name and the address; it returns true when this failure
// started a lockout.
func (t *throttle) fail(ctx context.Context, user, ip string) (bool, error) {
	locked := false
	for _, s := range []struct {
		scope, subject string
		limit          int
	}{{"user", strings.ToLower(user), t.cfg.UserLimit}, {"ip", ip, t.cfg.IPLimit}} {
		if s.subject == "" {
			continue
		}
		var lockedNow []bool
		err := t.db.WithContext(ctx).Raw(`INSERT INTO login_throttle AS l (scope, subject, failures, first_failure_at)
			VALUES (?, ?, 1, now())
			ON CONFLICT (scope, subject) DO UPDATE SET
				failures = CASE WHEN l.first_failure_at < now() - ? * interval '1 second' THEN 1 ELSE l.failures + 1 END,
				first_failure_at = CASE WHEN l.first_failure_at < now() - ? * interval '1 second' THEN now() ELSE l.first_failure_at END
			RETURNING failures >= ?`, s.scope, s.subject, t.cfg.Window.Seconds(), t.cfg.Window.Seconds(), s.limit).Scan(&lockedNow).Error
		if err != nil {
			return false, fmt.Errorf("count failed sign-in: %w", err)
		}
		if len(lockedNow) == 1 && lockedNow[0] {
			if err := t.db.WithContext(ctx).Exec(`UPDATE login_throttle SET locked_until = now() + ? * interval '1 second',
				failures = 0, first_failure_at = now() WHERE scope = ? AND subject = ?`,
				t.cfg.Lockout.Seconds(), s.scope, s.subject).Error; err != nil {
				return false, fmt.Errorf("lock out: %w", err)
			}
			locked = true
		}
	}
	return locked, nil
}

// succeed clears the name's failure count (the address keeps its own).
func (t *throttle) succeed(ctx context.Context, user string) error {
	return t.db.WithContext(ctx).Exec(`DELETE FROM login_throttle WHERE scope = 'user' AND subject = ?`, strings.ToLower(user)).Error
}
