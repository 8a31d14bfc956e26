package claim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// LocalFunc does the whole work of an operation whose effects are all local — rows in this
// database, nothing sent anywhere — in tx, the transaction that also holds the claim and
// completes the key. The snapshot it returns is the answer to this and every later request with
// the key. A final *Failure (a business refusal: insufficient balance) is recorded and replayed;
// any other error rolls everything back, the key included, so the next attempt executes again.
type LocalFunc func(ctx context.Context, tx *gorm.DB, l *Lease) (*Snapshot, error)

// errExisting ends a one-commit transaction whose claim met an existing key.
var errExisting = errors.New("existing key")

// RunLocal is the one-commit path: claim, fn's business rows and completion in one transaction,
// one commit. A racing duplicate's claim waits on the unique index until this transaction ends,
// then answers from the committed key (a replay) — or claims it, if this one rolled back. There
// is no lease to renew and no downstream to ask: until the commit nobody else sees the key, and
// after it the key is finished. A key left processing or failed_retryable by another path (the
// operation changed from two commits to one) is taken over and finished in one transaction too.
func (s *Store) RunLocal(ctx context.Context, req Request, fn LocalFunc) (*Outcome, error) {
	p, err := s.prepare(req)
	if err != nil {
		return nil, err
	}
	for round := 0; round < 5; round++ {
		out, err := s.runLocalOnce(ctx, p, fn, nil)
		if !errors.Is(err, errExisting) {
			return out, err
		}
		out, err = s.answerExisting(ctx, p)
		if errors.Is(err, errRaced) {
			continue
		}
		if err != nil || out.Kind != Acquired {
			return out, err
		}
		out, err = s.runLocalOnce(ctx, p, fn, out.Lease)
		if errors.Is(err, ErrLeaseLost) {
			continue
		}
		return out, err
	}
	return nil, fmt.Errorf("claim %s: the key kept changing under concurrent writers", p.digest)
}

// runLocalOnce runs one transaction: the claim (or, with held, the lease a takeover gave), fn and
// the completion. errExisting: the claim met a committed key, nothing was written.
func (s *Store) runLocalOnce(ctx context.Context, p *prepared, fn LocalFunc, held *Lease) (*Outcome, error) {
	var out *Outcome
	var final *Failure
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		l := held
		if l == nil {
			token := newToken()
			var id int64
			err := conn(tx).QueryRowContext(ctx, claimSQL,
				p.Tenant, p.Operation, p.Key, p.digest, p.intent.Fingerprint, p.intent.Version,
				string(p.intent.Canonical), s.cfg.Owner, token, s.cfg.LeaseTTL.Milliseconds(), p.dkey,
				p.intent.Amount, p.intent.Currency,
				p.Actor, detailJSON("attempt", 1, "owner", s.cfg.Owner, "one_commit", true),
			).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return errExisting
			}
			if err != nil {
				return fmt.Errorf("claim %s: %w", p.digest, err)
			}
			l = p.lease(id, token, 1, false, false, nil)
		}
		snap, err := fn(ctx, tx, l)
		if f := (*Failure)(nil); errors.As(err, &f) && !f.Retryable {
			final = f
			return err
		}
		if err != nil {
			return err
		}
		if err := s.complete(ctx, tx, l, snap, "completed", ""); err != nil {
			return err
		}
		out = &Outcome{Kind: Completed, KeyID: l.KeyID, Digest: p.digest, State: StateCompleted,
			Snapshot: snap, ResourceID: snap.ResourceID}
		return nil
	})
	if final != nil {
		// The business refused: its rows are rolled back with the claim; the verdict is recorded
		// in a claim of its own (two commits, for refusals only) and replayed from then on.
		return s.recordLocalRefusal(ctx, p, final, held)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// recordLocalRefusal claims the key again and fails it with the business verdict. A duplicate
// that claimed and finished it in between wins: its outcome is the key's answer.
func (s *Store) recordLocalRefusal(ctx context.Context, p *prepared, f *Failure, held *Lease) (*Outcome, error) {
	l := held
	if l == nil {
		out, err := s.claimPrepared(ctx, p)
		if err != nil || out.Kind != Acquired {
			return out, err
		}
		l = out.Lease
	}
	if err := s.Fail(context.WithoutCancel(ctx), nil, l, f); err != nil {
		return nil, err
	}
	return &Outcome{Kind: Failed, KeyID: l.KeyID, Digest: p.digest, State: StateFailedFinal, Failure: f, Snapshot: f.Snapshot}, nil
}
