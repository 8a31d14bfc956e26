package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Key is one row of idempotency_keys, as readers (the console, the daemon) see it.
type Key struct {
	ID                 int64
	Tenant             string
	Operation          string
	Key                string
	KeyDigest          string
	Fingerprint        string
	FingerprintVersion int
	Request            JSON
	State              State
	Version            int64
	LeaseOwner         *string
	LeaseExpiresAt     *time.Time
	LeaseExpired       bool
	Attempts           int
	DownstreamKey      string
	// ChannelAccount is the channel account the key's downstream call went through, when
	// recorded (Lease.ChannelAccount).
	ChannelAccount    *string
	AmountMinor       *int64
	Currency          *string
	ResponseStatus    *int
	ResponseHeaders   JSON
	ResponseBody      []byte
	ResourceID        *string
	ErrorCode         *string
	ErrorDetail       *string
	NotFoundAt        *time.Time
	LookupFailures    int
	NeedsAttention    bool
	LegalHold         bool
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CompletedAt       *time.Time
	ResponseExpiresAt *time.Time
	ExpiresAt         *time.Time

	// Held: the outcome outside is unknown; the stored answer is replayed until an operator
	// releases the key (ReleaseForRetry) or marks it final. RetryCleared: an operator vouched
	// that the failed attempt left nothing outside.
	Held, RetryCleared bool
}

// KeyColumns is the select list that fills a Key, from idempotency_keys (under any alias; the
// answer comes from key_responses by the key's id and response_day, left unqualified so that
// they name the outer row: key_responses has neither column).
const KeyColumns = `id, tenant, operation, key, key_digest, fingerprint, fingerprint_version, request::text AS request,
	state, version, lease_owner, lease_expires_at, COALESCE(lease_expires_at < now(), false) AS lease_expired,
	attempts, downstream_key, channel_account, amount_minor, currency,
	(SELECT r.status FROM key_responses r WHERE r.key_id = id AND r.day = response_day) AS response_status,
	(SELECT r.headers::text FROM key_responses r WHERE r.key_id = id AND r.day = response_day) AS response_headers,
	(SELECT r.body FROM key_responses r WHERE r.key_id = id AND r.day = response_day) AS response_body, resource_id, error_code, error_detail, not_found_at, lookup_failures, needs_attention, legal_hold,
	held, retry_cleared, created_at, updated_at, completed_at, response_expires_at, expires_at`

// Replayable says whether an operator or the daemon may drive the key again: it failed
// retryably, or it is processing and nobody holds a live lease.
func (k *Key) Replayable() bool {
	return k.State == StateFailedRetryable || (k.State == StateProcessing && k.LeaseExpired)
}

// Get reads one key by id. ErrNotFound when there is none. Callers that serve operators must
// check the operator may see k.Tenant.
func (s *Store) Get(ctx context.Context, id int64) (*Key, error) {
	var ks []Key
	if err := s.db.WithContext(ctx).Raw(`SELECT `+KeyColumns+` FROM idempotency_keys WHERE id = ?`, id).Scan(&ks).Error; err != nil {
		return nil, fmt.Errorf("get key %d: %w", id, err)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("key %d: %w", id, ErrNotFound)
	}
	return &ks[0], nil
}

// Event is one entry of a key's history.
type Event struct {
	ID     int64
	KeyID  int64
	At     time.Time
	Kind   string
	Actor  string
	Detail JSON
}

// History returns a key's events, oldest first (bounded by limit, at most 1000): the stored ones
// and the claim and completion recorded on the key row (the key_history view, migration 00059).
func (s *Store) History(ctx context.Context, keyID int64, limit int) ([]Event, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	var evs []Event
	err := s.db.WithContext(ctx).Raw(`SELECT id, key_id, at, kind, actor, detail::text AS detail
		FROM key_history WHERE key_id = ? ORDER BY id LIMIT ?`, keyID, limit).Scan(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("history of key %d: %w", keyID, err)
	}
	return evs, nil
}

// RecordEvent appends an event that records no transition (an operator's downstream check, a
// reveal): the key's history is the one timeline of everything that touched it.
func (s *Store) RecordEvent(ctx context.Context, keyID int64, kind, actor string, detail map[string]any) error {
	b, _ := json.Marshal(detail)
	if err := s.db.WithContext(ctx).Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, ?, ?, ?)`,
		keyID, kind, actor, s.traceDetail(ctx, string(b))).Error; err != nil {
		return fmt.Errorf("record %s on key %d: %w", kind, keyID, err)
	}
	return nil
}
