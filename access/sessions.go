package access

import (
	"context"
	"crypto/subtle"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Session is a signed-in browser: the operator and the CSRF token of its forms.
type Session struct {
	Operator *Operator
	CSRF     string
	idHash   string
}

// Sessions stores sessions in PostgreSQL so console replicas are stateless. The cookie holds a
// random id; the table holds its SHA-256 only.
type Sessions struct {
	db       *gorm.DB
	ops      *Operators
	idle     time.Duration
	absolute time.Duration
}

// NewSessions returns the session store on db: a session ends after idle without use or
// absolute after it began, whichever comes first.
func NewSessions(db *gorm.DB, ops *Operators, idle, absolute time.Duration) *Sessions {
	return &Sessions{db: db, ops: ops, idle: idle, absolute: absolute}
}

// Create starts a session for o and returns the cookie value.
func (s *Sessions) Create(ctx context.Context, o *Operator, ip, userAgent string) (string, error) {
	id := RandomSecret(32)
	if len(userAgent) > 256 {
		userAgent = userAgent[:256]
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Expired sessions of this operator go now; a bounded sweep, not a job.
		if err := tx.Exec(`DELETE FROM sessions WHERE operator_id = ? AND (expires_at < now() OR last_seen_at < now() - ? * interval '1 second')`,
			o.ID, s.idle.Seconds()).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO sessions (id_hash, operator_id, csrf_token, expires_at, ip, user_agent)
			VALUES (decode(?, 'hex'), ?, ?, now() + ? * interval '1 second', ?, ?)`,
			hashSecret(id), o.ID, RandomSecret(32), s.absolute.Seconds(), ip, userAgent).Error; err != nil {
			return err
		}
		return tx.Model(&operatorModel{ID: o.ID}).Update("last_login_at", gorm.Expr("now()")).Error
	})
	if err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	return id, nil
}

type sessionRow struct {
	OperatorID int64
	CSRFToken  string
	Idle       bool
	Expired    bool
	Stale      bool
}

// Load returns the live session for a cookie value: ErrUnauthenticated when it is unknown, idle
// too long, past its absolute lifetime, or its operator is disabled.
func (s *Sessions) Load(ctx context.Context, cookie string) (*Session, error) {
	if cookie == "" || len(cookie) > 128 {
		return nil, ErrUnauthenticated
	}
	h := hashSecret(cookie)
	var rows []sessionRow
	err := s.db.WithContext(ctx).Raw(`SELECT operator_id, csrf_token AS csrf_token,
			last_seen_at < now() - ? * interval '1 second' AS idle,
			expires_at < now() AS expired,
			last_seen_at < now() - interval '30 seconds' AS stale
		FROM sessions WHERE id_hash = decode(?, 'hex')`, s.idle.Seconds(), h).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("load session: %w", err)
	}
	if len(rows) == 0 {
		return nil, ErrUnauthenticated
	}
	r := rows[0]
	if r.Idle || r.Expired {
		_ = s.db.WithContext(ctx).Exec(`DELETE FROM sessions WHERE id_hash = decode(?, 'hex')`, h).Error
		return nil, ErrUnauthenticated
	}
	o, err := s.ops.ByID(ctx, r.OperatorID)
	if err != nil || o.Disabled {
		return nil, ErrUnauthenticated
	}
	if r.Stale { // touch at most every 30 s: the idle timeout does not need every request to write
		if err := s.db.WithContext(ctx).Exec(`UPDATE sessions SET last_seen_at = now() WHERE id_hash = decode(?, 'hex')`, h).Error; err != nil {
			return nil, fmt.Errorf("touch session: %w", err)
		}
	}
	return &Session{Operator: o, CSRF: r.CSRFToken, idHash: h}, nil
}

// Delete ends sess.
func (s *Sessions) Delete(ctx context.Context, sess *Session) error {
	return s.db.WithContext(ctx).Exec(`DELETE FROM sessions WHERE id_hash = decode(?, 'hex')`, sess.idHash).Error
}

// CheckCSRF compares a submitted token with the session's, in constant time: ErrCSRF when they
// differ.
func (sess *Session) CheckCSRF(token string) error {
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(sess.CSRF)) != 1 {
		return ErrCSRF
	}
	return nil
}
