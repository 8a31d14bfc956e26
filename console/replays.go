package console

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/replay"
)

// The replay workflow (preview, request, approval, execution, bulk) is the replay package's;
// the console translates HTTP into its calls: it reads the key or request within the
// operator's scope (scope.go), hands the workflow the operator as a replay.Actor, and maps the
// workflow's errors to its own (replayErr).

// actorOf is r's operator as the replay workflow sees it.
func actorOf(r *request) replay.Actor { return replayActor(r.op, r.ip) }

func replayActor(op *Operator, ip string) replay.Actor {
	return replay.Actor{ID: op.ID, Name: op.Name, Tenants: op.Tenants, IP: ip}
}

// ReplayAuditor records the replay workflow's rows in the audit log (cmd gives it to the
// daemon's bulk job).
func ReplayAuditor(a *AuditLog) replay.Auditor { return replayAudit{a} }

type replayAudit struct{ a *AuditLog }

func (r replayAudit) Append(ctx context.Context, tx *gorm.DB, e replay.AuditEntry) error {
	return r.a.Append(ctx, tx, Entry(e))
}

// replayErr maps the workflow's errors to the console's: a guard's refusal (409, or 403 for
// approving one's own request), a bad field (400), a missing request or run (404).
func replayErr(err error) error {
	var re *replay.RefusedError
	var ie *replay.InputError
	switch {
	case errors.As(err, &re):
		kind := ErrRefused
		if errors.Is(re.Kind, replay.ErrForbidden) {
			kind = ErrForbidden
		}
		return &RefusedError{Reason: re.Reason, Kind: kind, Why: re.Phrasing()}
	case errors.As(err, &ie):
		return &InputError{Field: ie.Field, Reason: ie.Reason, Why: ie.Why}
	case errors.Is(err, replay.ErrNotFound):
		return fmt.Errorf("%s: %w", err.Error(), ErrNotFound)
	}
	return err
}

// RefusedError is a guard's refusal with the reason an operator can act on. Kind is ErrRefused
// (409) or ErrForbidden (403, e.g. approving one's own request).
type RefusedError struct {
	Reason string
	Kind   error
	Why    errs.Phrase // Reason as a phrase (see InputError)
}

// Phrasing is the reason.
func (e *RefusedError) Phrasing() errs.Phrase {
	if e.Why.Format == "" {
		return errs.Verbatim(e.Reason)
	}
	return e.Why
}

func (e *RefusedError) Error() string { return e.Reason }
func (e *RefusedError) Unwrap() error { return e.Kind }

func refused(format string, args ...any) error {
	why := errs.Phrasef(format, args...)
	return &RefusedError{Reason: why.String(), Kind: ErrRefused, Why: why}
}

// markFinal moves a stuck key to failed_final on an administrator's word, with a reason.
func (s *Server) markFinal(ctx context.Context, op *Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	return s.adminKeyAction(ctx, op, ip, keyID, token, reason, replay.ActionFinal, "key.mark_final",
		func(tx *gorm.DB, version int64, reason string) error {
			return s.claims.MarkFinal(ctx, tx, keyID, version, op.Actor(), reason)
		}, nil)
}

// releaseForRetry lets the next client retry of a stuck or held key execute, on an
// administrator's word (with a reason) that the failed attempt changed nothing outside.
func (s *Server) releaseForRetry(ctx context.Context, op *Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	return s.adminKeyAction(ctx, op, ip, keyID, token, reason, replay.ActionRelease, "key.release_for_retry",
		func(tx *gorm.DB, version int64, reason string) error {
			return s.claims.ReleaseForRetry(ctx, tx, keyID, version, op.Actor(), reason)
		}, func(k *claim.Key) map[string]any { return map[string]any{"held": k.Held} })
}

// adminKeyAction is an administrator's transition of one key: the page's single-use token (bound
// to the version it showed) and a reason, then the claim's compare-and-set (apply) with the audit
// row in its transaction. extra adds detail to the audit row.
func (s *Server) adminKeyAction(ctx context.Context, op *Operator, ip string, keyID int64, token, reason, tokenAction, auditAction string,
	apply func(tx *gorm.DB, version int64, reason string) error, extra func(*claim.Key) map[string]any) (*claim.Key, error) {
	k, err := s.getKey(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	version, err := s.replays.CheckToken(tokenAction, op.ID, keyID, token)
	if err != nil {
		return nil, replayErr(err)
	}
	if reason, err = replay.CheckReason(reason); err != nil {
		return nil, replayErr(err)
	}
	detail := map[string]any{"digest": k.KeyDigest, "version": version, "reason": reason}
	if extra != nil {
		maps.Copy(detail, extra(k))
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := apply(tx, version, reason); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: auditAction,
			Target: fmt.Sprintf("key:%d", keyID), Tenant: k.Tenant, Detail: detail})
	})
	switch {
	case errors.Is(err, claim.ErrKeyChanged):
		return nil, refused("the key changed since the page was loaded (version %d, now %d): nothing was done; look again", version, k.Version)
	case errors.Is(err, claim.ErrNotReplayable):
		return nil, &RefusedError{Reason: k.ReplayRefusal(), Kind: ErrRefused, Why: k.ReplayRefusalPhrase()}
	case err != nil:
		return nil, err
	}
	return s.claims.Get(ctx, keyID)
}
