package claim

import "time"

// What a service's claim needs of retention: the periods a key is stamped with when it ends
// (ExpiryPolicy, per operation and state), and which keys no retention pass may touch
// (UnresolvedSQL). The passes themselves (tombstone, delete, day drops, stamps, legal hold) are
// the operator's: package keys runs them for package retention.

// UnresolvedSQL is the predicate (on idempotency_keys aliased k) of failed_retryable keys whose
// attempt may have acted outside and that wait for someone to find out: held for an operator (an
// External route's 5xx, a plain gRPC handler's error, a panicking operation, a Recover the lookup
// contradicts), flagged "needs attention", or with an outcome nobody has settled — not proven
// absent (downstream twice said not found) and not released by an operator. (Processing keys are
// spared anyway; a final state is a known outcome, whatever flag it still carries.) Retention never
// touches them until they are resolved (the retry that asks first, an operator's release, mark
// final or replay); the dashboard counts them (CountUnresolved). The partial index
// idempotency_keys_unresolved_idx (migration 00072) serves both.
const UnresolvedSQL = `(k.state = 'failed_retryable' AND (k.held OR k.needs_attention
    OR (NOT k.retry_cleared AND k.error_code IS DISTINCT FROM 'downstream_not_found')))`

// ExpiryPolicy is one pair of retention periods for keys of Operation ("*": every operation
// without a policy of its own) that ended in State.
type ExpiryPolicy struct {
	Operation    string
	State        State
	KeepResponse time.Duration
	KeepKey      time.Duration
}
