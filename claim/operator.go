package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemops/idemops/errs"
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
