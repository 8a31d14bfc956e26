package claim

import (
	"context"
	"fmt"
	"time"
)

// KeyStatus is what a caller may learn of its own key: where it stands and, once it has an
// answer, the answer a replay gives. It never carries the stored request.
type KeyStatus struct {
	State State
	// Held: failed with an unknown outcome outside; Snapshot is replayed until an operator
	// decides (see Failure.Hold).
	Held bool
	// ResultExpired: retention dropped the stored answer; only the tombstone remains.
	ResultExpired bool
	ResourceID    string
	// RetryAfter: while processing, when to ask again.
	RetryAfter time.Duration
	// Snapshot: what a replay answers (completed, failed_final, held), nil otherwise.
	Snapshot *Snapshot
}

// StatusOf reads the key (tenant, operation, key) for its caller. tenant must come from the
// caller's authentication: a key of another tenant is ErrNotFound, exactly like a missing one.
func (s *Store) StatusOf(ctx context.Context, tenant, operation, key string) (*KeyStatus, error) {
	if err := validateScope(tenant, operation); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var rows []existingRow
	if err := s.db.WithContext(ctx).Raw(existingSQL, tenant, operation, key).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("status of %s: %w", s.Digest(tenant, operation, key), err)
	}
	if len(rows) == 0 {
		return nil, ErrNotFound
	}
	r := rows[0]
	st := &KeyStatus{State: r.State, Held: r.Held && r.State == StateFailedRetryable, ResourceID: deref(r.ResourceID)}
	switch {
	case r.State == StateProcessing:
		st.RetryAfter = retryAfter(time.Duration(max(r.LeaseRemainingMs, 0))*time.Millisecond, r.LeaseHeld)
	case (r.State == StateCompleted || r.State == StateFailedFinal) && r.ResponseExpired:
		st.ResultExpired = true
	case r.State == StateCompleted || r.State == StateFailedFinal || st.Held:
		st.Snapshot = r.snapshot()
	}
	return st, nil
}
