package claim

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemops/idemops/errs"
	"gorm.io/gorm"
)

// ErrKeyChanged: the key is no longer at the version the caller read (an operator's preview or
// confirmation is stale); nothing was written.
var ErrKeyChanged = errs.New(errs.Conflict, "the key changed since it was read")

// ReplayRefusal says, in words an operator can act on, why k may not be replayed; "" when it
// may (Replayable). The rule is the claim's, so the console and the API show the same reasons.
func (k *Key) ReplayRefusal() string {
	if p := k.ReplayRefusalPhrase(); p.Format != "" {
		return p.String()
	}
	return ""
}

// ReplayRefusalPhrase is ReplayRefusal as a phrase (its times as time.Time), for a console that
// shows it in the operator's language; the zero Phrase when k may be replayed.
func (k *Key) ReplayRefusalPhrase() errs.Phrase {
	switch {
	case k.Replayable():
		return errs.Phrase{}
	case k.State == StateCompleted:
		return errs.Phrasef("the key is completed: its stored response is the answer, nothing is replayed")
	case k.State == StateFailedFinal:
		return errs.Phrasef("the key failed finally (%s): a final failure is the answer to every retry and is never executed again",
			deref(k.ErrorCode))
	case k.LeaseOwner != nil:
		return errs.Phrasef("a live lease is held by %s until %s: that attempt may still be running",
			*k.LeaseOwner, timeArg(k.LeaseExpiresAt))
	case k.NotFoundAt != nil:
		return errs.Phrasef("the key is parked until %s: downstream said not found at %s and the quarantine has not passed yet",
			timeArg(k.LeaseExpiresAt), timeArg(k.NotFoundAt))
	default:
		return errs.Phrasef("the key is parked until %s after downstream could not answer (%d failed lookups)",
			timeArg(k.LeaseExpiresAt), k.LookupFailures)
	}
}

// timeArg is an optional moment as a phrase's argument: the time (written 2006-01-02 15:04:05Z
// in English), or "—".
func timeArg(t *time.Time) any {
	if t == nil {
		return "—"
	}
	return *t
}

// LookupLease is a lease carrying k's fields and no token, for a read-only Lookup (an operator's
// preview or downstream check). It cannot write: every holder write compares the token.
func (k *Key) LookupLease(actor string) *Lease {
	return &Lease{KeyID: k.ID, Tenant: k.Tenant, Operation: k.Operation, Key: k.Key, Digest: k.KeyDigest,
		DownstreamKey: k.DownstreamKey, Intent: json.RawMessage(k.Request), Amount: k.AmountMinor,
		Currency: deref(k.Currency), Attempt: k.Attempts, NotFoundAt: k.NotFoundAt,
		Takeover: k.State == StateProcessing, Retry: k.State == StateFailedRetryable, Actor: actor}
}

// TakeoverAt is Takeover bound to the version the caller read: an operator's confirmed replay
// runs only if the key is still exactly as previewed. ErrKeyChanged when it moved on;
// ErrNotReplayable when its state does not allow a takeover.
func (s *Store) TakeoverAt(ctx context.Context, keyID, version int64, actor string) (*Lease, error) {
	k, err := s.Get(ctx, keyID)
	if err != nil {
		return nil, err
	}
	if k.Version != version {
		return nil, fmt.Errorf("takeover key %d: at version %d, not %d: %w", keyID, k.Version, version, ErrKeyChanged)
	}
	l, err := s.takeoverKey(ctx, k, actor)
	if errors.Is(err, ErrLeaseLost) {
		return nil, fmt.Errorf("takeover key %d at version %d: %w", keyID, version, ErrKeyChanged)
	}
	return l, err
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
func (s *Store) MarkFinal(ctx context.Context, tx *gorm.DB, keyID, version int64, actor, reason string) error {
	return s.adminAction(ctx, tx, fmt.Sprintf("mark key %d final", keyID), keyID, version, reason, markFinalSQL,
		keyID, version, reason, int64(s.cfg.KeepResponse.Seconds()), int64(s.cfg.KeepKey.Seconds()), actor,
		detailJSON("reason", reason, "version", version))
}

// adminAction runs one of an administrator's guarded key actions (query returns the key's id
// when its guard held) and, when it wrote nothing, says why: the key moved on from version
// (ErrKeyChanged), or its state refuses the action (ErrNotReplayable).
func (s *Store) adminAction(ctx context.Context, tx *gorm.DB, what string, keyID, version int64, reason, query string, args ...any) error {
	if tx == nil {
		tx = s.db
	}
	if reason == "" {
		return fieldErr(ErrInvalidIntent, "reason", "must not be empty")
	}
	var id int64
	err := conn(tx).QueryRowContext(ctx, query, args...).Scan(&id)
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
		return fmt.Errorf("%s: at version %d, not %d: %w", what, k.Version, version, ErrKeyChanged)
	default:
		return fmt.Errorf("%s: %s: %w", what, k.ReplayRefusal(), ErrNotReplayable)
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
func (s *Store) ReleaseForRetry(ctx context.Context, tx *gorm.DB, keyID, version int64, actor, reason string) error {
	return s.adminAction(ctx, tx, fmt.Sprintf("release key %d for retry", keyID), keyID, version, reason,
		releaseForRetrySQL, keyID, version, reason, actor, detailJSON("reason", reason, "version", version))
}
