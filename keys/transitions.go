package keys

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// An administrator's two transitions of a stuck or held key, which services never make: mark it
// final, or release it for retry. Each is a compare-and-set on the version the operator saw,
// with its history event in the same statement; package keys and claim are the only writers of
// the keys table.

// reasonDetail is a key event's detail carrying only the operator's reason.
func reasonDetail(reason string) string {
	b, _ := json.Marshal(struct {
		Reason string `json:"reason"`
	}{reason})
	return string(b)
}

// detail is a transition's key event detail: the operator's reason and the version it acted on.
func detail(reason string, version int64) string {
	b, _ := json.Marshal(struct {
		Reason  string `json:"reason"`
		Version int64  `json:"version"`
	}{reason, version})
	return string(b)
}

// markFinalSQL moves a key nobody holds to failed_final: a compare-and-set on the version the
// operator saw, with its history event in the same statement.
const markFinalSQL = `
WITH u AS (
    UPDATE idempotency_keys
    SET state = 'failed_final', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
        error_code = 'marked_final', error_detail = $3, not_found_at = NULL, needs_attention = false, held = false,
        completed_at = now(), response_expires_at = now() + $4 * interval '1 second',
        expires_at = now() + $5 * interval '1 second', version = version + 1, updated_at = now()
    WHERE id = $1 AND version = $2
      AND (state = 'failed_retryable' OR (state = 'processing' AND lease_expires_at < now()))
    RETURNING id, state
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail)
    SELECT id, 'marked_final', $6, $7 FROM u
)
SELECT id FROM u`

// MarkFinal moves a stuck key to failed_final on behalf of actor (an administrator), with a
// reason, in tx (nil: the store's handle) so the caller's audit row commits with it. Allowed
// when nobody holds a live lease (the states Replayable accepts) and the key is still at
// version; otherwise ErrNotReplayable or ErrKeyChanged, and nothing is written.
func MarkFinal(ctx context.Context, s *claim.Store, tx *gorm.DB, keyID, version int64, actor, reason string) error {
	return adminAction(ctx, s, tx, fmt.Sprintf("mark key %d final", keyID), keyID, version, reason, markFinalSQL,
		keyID, version, reason, int64(s.Config().KeepResponse.Seconds()), int64(s.Config().KeepKey.Seconds()), actor,
		detail(reason, version))
}

// adminAction runs one of an administrator's guarded key actions (query returns the key's id
// when its guard held) and, when it wrote nothing, says why: the key moved on from version
// (claim.ErrKeyChanged), or its state refuses the action (claim.ErrNotReplayable).
func adminAction(ctx context.Context, s *claim.Store, tx *gorm.DB, what string, keyID, version int64, reason, query string, args ...any) error {
	if tx == nil {
		tx = s.DB()
	}
	if reason == "" {
		return errs.Fieldf("reason", "must not be empty").Of(claim.ErrInvalidIntent)
	}
	var id int64
	err := tx.Statement.ConnPool.QueryRowContext(ctx, query, args...).Scan(&id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, err)
	}
	k, gerr := s.Get(ctx, keyID)
	switch {
	case gerr != nil:
		return gerr
	case k.Version != version || k.Replayable(): // the second: its lease expired just now
		return fmt.Errorf("%s: at version %d, not %d: %w", what, k.Version, version, claim.ErrKeyChanged)
	default:
		return fmt.Errorf("%s: %s: %w", what, k.ReplayRefusal(), claim.ErrNotReplayable)
	}
}

// releaseForRetrySQL returns a key nobody holds to failed_retryable with the operator's word that
// its failed attempt left nothing outside: the hold and its stored answer go, and the next
// attempt with the same intent executes (attempt + 1) without a downstream check where none is
// possible (a wrapped handler: Lease.MustCheckDownstream is false); Drive, which holds an
// Operation, asks downstream first all the same.
const releaseForRetrySQL = `
WITH u AS (
    UPDATE idempotency_keys
    SET state = 'failed_retryable', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
        held = false, retry_cleared = true, needs_attention = false, not_found_at = NULL,
        response_day = NULL,
        error_code = 'operator_released', error_detail = $3, version = version + 1, updated_at = now()
    WHERE id = $1 AND version = $2
      AND (state = 'failed_retryable' OR (state = 'processing' AND lease_expires_at < now()))
    RETURNING id
), old AS (
    SELECT response_day FROM idempotency_keys WHERE id = $1
), gone AS (
    -- The stored answer goes with the hold (old: the row as it was before this statement).
    DELETE FROM key_responses WHERE key_id IN (SELECT id FROM u) AND day = (SELECT response_day FROM old)
), ev AS (
    INSERT INTO key_events (key_id, kind, actor, detail)
    SELECT id, 'released_for_retry', $4, $5 FROM u
)
SELECT id FROM u`

// ReleaseForRetry lets the next client retry of a stuck or held key execute, on behalf of actor
// (an administrator who checked that the failed attempt changed nothing outside), with a
// reason, in tx (nil: the store's handle) so the caller's audit row commits with it. The same
// preconditions and errors as MarkFinal.
func ReleaseForRetry(ctx context.Context, s *claim.Store, tx *gorm.DB, keyID, version int64, actor, reason string) error {
	return adminAction(ctx, s, tx, fmt.Sprintf("release key %d for retry", keyID), keyID, version, reason,
		releaseForRetrySQL, keyID, version, reason, actor, detail(reason, version))
}
