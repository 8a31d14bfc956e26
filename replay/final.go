package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
)

// Beside a replay, an administrator has two ways out for a stuck or held key: mark it final (its
// stored answer, or the failure, becomes what every later retry gets) or release it for retry
// (the next client retry executes). Both are confirmed with the page's single-use token, bound
// to the key version the page showed, and a reason; both are the claim's compare-and-set with
// the audit row in its transaction.

// MarkFinal moves the stuck key k (read within a's scope) to failed_final on a's word, with a
// reason. Errors: *errs.FieldError (token, reason), *errs.RefusedError (changed since, or not in
// a state that allows it).
func (w *Workflow) MarkFinal(ctx context.Context, a Actor, k *claim.Key, token, reason string) (*claim.Key, error) {
	return w.adminKeyAction(ctx, a, k, token, reason, ActionFinal, "key.mark_final",
		func(tx *gorm.DB, version int64, reason string) error {
			return keys.MarkFinal(ctx, w.claims, tx, k.ID, version, a.Ref(), reason)
		}, nil)
}

// ReleaseForRetry lets the next client retry of the stuck or held key k (read within a's scope)
// execute, on a's word (with a reason) that the failed attempt changed nothing outside. Errors
// as MarkFinal.
func (w *Workflow) ReleaseForRetry(ctx context.Context, a Actor, k *claim.Key, token, reason string) (*claim.Key, error) {
	return w.adminKeyAction(ctx, a, k, token, reason, ActionRelease, "key.release_for_retry",
		func(tx *gorm.DB, version int64, reason string) error {
			return keys.ReleaseForRetry(ctx, w.claims, tx, k.ID, version, a.Ref(), reason)
		}, func(k *claim.Key) map[string]any { return map[string]any{"held": k.Held} })
}

// adminKeyAction checks the token and the reason, then applies the transition with the audit
// row in its transaction. extra adds detail to the audit row.
func (w *Workflow) adminKeyAction(ctx context.Context, a Actor, k *claim.Key, token, reason, tokenAction, auditAction string,
	apply func(tx *gorm.DB, version int64, reason string) error, extra func(*claim.Key) map[string]any) (*claim.Key, error) {
	version, err := w.CheckToken(tokenAction, a.ID, k.ID, token)
	if err != nil {
		return nil, err
	}
	if reason, err = CheckReason(reason); err != nil {
		return nil, err
	}
	detail := map[string]any{"digest": k.KeyDigest, "version": version, "reason": reason}
	if extra != nil {
		maps.Copy(detail, extra(k))
	}
	err = w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := apply(tx, version, reason); err != nil {
			return err
		}
		return w.audit.Append(ctx, tx, audit.Entry{Actor: a.Ref(), IP: a.IP, Action: auditAction,
			Target: fmt.Sprintf("key:%d", k.ID), Tenants: []string{k.Tenant}, Detail: detail})
	})
	switch {
	case errors.Is(err, claim.ErrKeyChanged):
		return nil, refused("the key changed since the page was loaded (version %d, now %d): nothing was done; look again", version, k.Version)
	case errors.Is(err, claim.ErrNotReplayable):
		return nil, errs.Refused(errs.Conflict, k.ReplayRefusalPhrase())
	case err != nil:
		return nil, err
	}
	return w.claims.Get(ctx, k.ID)
}
