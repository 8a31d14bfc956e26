package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"time"

	"gorm.io/gorm"
)

// Document is what downstream holds for a downstream key: the result of an Execute, or of a
// Lookup that found it.
type Document struct {
	// ResourceID names the created resource (a charge id).
	ResourceID string
	// Failure is set when downstream has the document but it failed (declined); the key then
	// fails with this verdict instead of completing.
	Failure *Failure
	// Body is downstream's own representation, for Apply.
	Body json.RawMessage
}

// Operation is one business action idempotency keys protect. Implementations live in
// downstream/ (a registry by name); the claim logic drives them.
type Operation interface {
	// Name is the operation part of a key's scope.
	Name() string
	// Intent says which request fields carry intent.
	Intent() IntentSpec
	// Execute performs the action downstream, sending l.DownstreamKey. A *Failure sorts the
	// error; any other error is ambiguous and treated as retryable.
	Execute(ctx context.Context, l *Lease) (*Document, error)
	// Lookup asks downstream, read-only, for the document under l.DownstreamKey: (nil, nil) when
	// downstream answers "not found"; an error when it cannot answer.
	Lookup(ctx context.Context, l *Lease) (*Document, error)
	// Apply writes the business rows for doc in tx and returns the response snapshot; it runs in
	// the transaction that completes the key.
	Apply(ctx context.Context, tx *gorm.DB, l *Lease, doc *Document) (*Snapshot, error)
}

// Redriver is implemented by Operations whose keys the daemon may execute again once downstream
// has twice said "not found" a quarantine apart. Others become failed_retryable instead, for the
// client's own retry.
type Redriver interface {
	Redrive() bool
}

// Run is the whole path of a request: claim → (when an earlier attempt may have reached
// downstream: look it up first) → execute → apply + complete in one transaction, renewing the
// lease while it works. Everyone — services, the daemon, reconciliation fixes, operators — goes
// through here or through Drive.
func (s *Store) Run(ctx context.Context, op Operation, req Request) (*Outcome, error) {
	req.Operation = op.Name()
	req.Spec = op.Intent()
	out, err := s.Claim(ctx, req)
	if err != nil || out.Kind != Acquired {
		return out, err
	}
	return s.Drive(ctx, op, out.Lease, DriveOptions{Execute: true})
}

// DriveOptions says what a holder may do once absence downstream is proven.
type DriveOptions struct {
	// Execute: run the operation on a fresh claim, or once downstream has twice said "not found"
	// a quarantine apart (client retries, operator replays whose preview showed a send, the
	// reclaimer for an operation that opts into redrive). When false, Execute is never called on
	// any branch: downstream is asked, and a proven absence leaves the key failed_retryable for
	// the client's own retry.
	Execute bool
	// HoldThroughQuarantine: on a first not-found, keep the lease (renewed) and wait out the
	// quarantine here, then look again and execute or record — instead of parking the key for the
	// next taker. An operator's replay does this, so that it owns the key until it ends and the
	// reclaimer (which takes only lapsed leases) cannot take it over in between. Bounded by ctx:
	// when ctx ends first, the lease lapses and the key is the reclaimer's again.
	HoldThroughQuarantine bool
	// HoldIfNotFound, when set, is the held failure (HeldFailure, with its answer) the key ends
	// in at the first not-found: for a holder that knows the document exists — reconciliation's
	// Recover, whose finding rests on the channel's statement — a not-found contradicts what it
	// knows; an operator decides, and neither this drive nor a later retry executes.
	HoldIfNotFound *Failure
}

// Drive takes an acquired lease to its end. A fresh claim executes at once; every other lease
// asks downstream first — a takeover, a retry, a key an operator released for retry (its flags
// say nothing happened outside, but an Operation can always ask), and any drive without
// Execute: found → complete (or fail) from downstream's document, executing nothing; not found
// → execute only on the second not-found a quarantine after the first, and only with Execute;
// cannot answer → the key is parked with a backoff and, after a few tries, flagged.
func (s *Store) Drive(ctx context.Context, op Operation, l *Lease, opt DriveOptions) (out *Outcome, err error) {
	if !s.tracing {
		return s.drive(ctx, op, l, opt)
	}
	ctx, span := s.startSpan(ctx, "idemops.drive", l.Digest, l.Operation, l.Attempt)
	defer func() {
		if err == nil && out != nil && span.IsRecording() {
			span.SetAttributes(attribute.String("idemops.outcome", string(out.Kind)))
		}
		endSpan(span, err)
	}()
	return s.drive(ctx, op, l, opt)
}

func (s *Store) drive(ctx context.Context, op Operation, l *Lease, opt DriveOptions) (*Outcome, error) {
	ctx, stop := s.keepRenewed(ctx, l)
	defer stop()
	out := &Outcome{KeyID: l.KeyID, Digest: l.Digest}

	if l.MustCheckDownstream() || l.Attempt > 1 || !opt.Execute {
		// The claim's rule for an unknown outcome (Judge): act only on absence proven by two
		// not-founds a quarantine apart.
		for held := false; ; held = true {
			lctx, lspan := s.startSpan(ctx, "idemops.downstream.lookup", l.Digest, l.Operation, l.Attempt)
			doc, err := lookupSafely(lctx, op, l)
			endSpan(lspan, err)
			v := s.Judge(doc != nil, err, l.NotFoundAt)
			switch {
			case v == AskLater:
				wait, rerr := s.RecordLookupError(ctx, l, err)
				if rerr != nil {
					return nil, rerr
				}
				if p := (*PanicError)(nil); errors.As(err, &p) {
					s.cfg.Logger.Error("operation panicked; key parked", "digest", l.Digest, "method", p.Method, "panic_type", p.Type)
					return nil, fmt.Errorf("%s: %w", l.Digest, p)
				}
				out.Kind, out.State, out.RetryAfter = InProgress, StateProcessing, wait
				return out, nil
			case v == Found:
				return s.finish(ctx, op, l, doc, true)
			case opt.HoldIfNotFound != nil:
				if err := s.Fail(context.WithoutCancel(ctx), nil, l, opt.HoldIfNotFound); err != nil {
					return nil, err
				}
				out.Kind, out.State, out.Failure = Failed, StateFailedRetryable, opt.HoldIfNotFound
				out.Snapshot = opt.HoldIfNotFound.Snapshot
				return out, nil
			case v == NotFoundOnce && opt.HoldThroughQuarantine && !held:
				if err := s.holdThroughQuarantine(ctx, l); err != nil {
					return nil, err
				}
				continue // look again, holding the key
			case v == NotFoundOnce:
				wait, err := s.RecordDownstreamNotFound(ctx, l)
				if err != nil {
					return nil, err
				}
				out.Kind, out.State, out.RetryAfter = InProgress, StateProcessing, wait
				return out, nil
			}
			break // Absent: proven
		}
		if !opt.Execute {
			f := RetryableFailure("downstream_not_found", "downstream twice said not found; the client may retry")
			if err := s.Fail(ctx, nil, l, f); err != nil {
				return nil, err
			}
			out.Kind, out.State, out.Failure = Failed, StateFailedRetryable, f
			return out, nil
		}
		if err := s.markExecuting(ctx, l); err != nil {
			return nil, err
		}
	}

	ectx, espan := s.startSpan(ctx, "idemops.downstream.execute", l.Digest, l.Operation, l.Attempt)
	doc, err := executeSafely(ectx, op, l)
	endSpan(espan, err)
	if ctxErr := context.Cause(ctx); ctxErr != nil && errors.Is(ctxErr, ErrLeaseLost) {
		return nil, fmt.Errorf("execute %s: %w", l.Digest, ErrLeaseLost)
	}
	if p := (*PanicError)(nil); errors.As(err, &p) {
		return nil, s.holdPanicked(ctx, l, p)
	}
	if err != nil {
		f := asFailure(err)
		// The key's record must outlive a cancelled request context.
		if ferr := s.Fail(context.WithoutCancel(ctx), nil, l, f); ferr != nil {
			return nil, ferr
		}
		out.Kind, out.Failure, out.Snapshot = Failed, f, f.Snapshot
		out.State = StateFailedFinal
		if f.Retryable {
			out.State = StateFailedRetryable
		}
		return out, nil
	}
	return s.finish(ctx, op, l, doc, false)
}

// finish applies a downstream document: a failed one fails the key with its verdict; a
// successful one runs Apply and Complete in one transaction.
func (s *Store) finish(ctx context.Context, op Operation, l *Lease, doc *Document, recovered bool) (out *Outcome, err error) {
	if !s.tracing {
		return s.finishTraced(ctx, op, l, doc, recovered)
	}
	ctx, span := s.startSpan(ctx, "idemops.complete", l.Digest, l.Operation, l.Attempt)
	defer func() { endSpan(span, err) }()
	return s.finishTraced(ctx, op, l, doc, recovered)
}

func (s *Store) finishTraced(ctx context.Context, op Operation, l *Lease, doc *Document, recovered bool) (*Outcome, error) {
	out := &Outcome{KeyID: l.KeyID, Digest: l.Digest, ResourceID: doc.ResourceID}
	ctx = context.WithoutCancel(ctx) // downstream acted: record it even if the caller went away
	if doc.Failure != nil {
		if err := s.Fail(ctx, nil, l, doc.Failure); err != nil {
			return nil, err
		}
		out.Kind, out.Failure, out.Snapshot = Failed, doc.Failure, doc.Failure.Snapshot
		out.State = StateFailedFinal
		if doc.Failure.Retryable {
			out.State = StateFailedRetryable
		}
		return out, nil
	}
	kind, event := Completed, "completed"
	if recovered {
		kind, event = Recovered, "recovered_from_downstream"
	}
	apply := func(tx *gorm.DB) error {
		snap, err := applySafely(ctx, op, tx, l, doc)
		if err != nil {
			return fmt.Errorf("apply %s: %w", l.Digest, err)
		}
		out.Snapshot = snap
		detail := detailJSON("status", snap.Status, "resource_id", snap.ResourceID, "attempt", l.Attempt, "recovered", recovered)
		if l.ChannelAccount != "" {
			detail = detailJSON("status", snap.Status, "resource_id", snap.ResourceID, "attempt", l.Attempt, "recovered", recovered,
				"channel_account", l.ChannelAccount)
		}
		return s.complete(ctx, tx, l, snap, event, detail)
	}
	// A lost connection leaves the commit's outcome unknown: re-read the key. Completed means
	// it committed; our token still on the row means it rolled back, and the transaction (Apply
	// and the completion, compare-and-set on the token) runs again; bounded.
	var err error
	for round := 0; ; round++ {
		err = s.db.WithContext(ctx).Transaction(apply)
		if !ConnLost(err) || round == 2 {
			break
		}
		applied, held, rerr := s.holderOutcome(ctx, l, StateCompleted)
		if rerr != nil {
			err = fmt.Errorf("complete %s: outcome unknown after a lost connection (%v): %w", l.Digest, err, rerr)
			break
		}
		if applied {
			err = nil
			break
		}
		if !held {
			err = fmt.Errorf("complete %s: %w", l.Digest, ErrLeaseLost)
			break
		}
	}
	if p := (*PanicError)(nil); errors.As(err, &p) {
		return nil, s.holdPanicked(ctx, l, p) // the transaction rolled back; downstream has the document
	}
	if err != nil {
		return nil, err
	}
	out.Kind, out.State = kind, StateCompleted
	return out, nil
}

// KeepRenewed renews l every LeaseTTL/3 until stop is called, for a holder whose work may
// outlast the lease (a wrapped HTTP handler); when the lease is lost, the returned context is
// cancelled with ErrLeaseLost as its cause so the work stops.
func (s *Store) KeepRenewed(ctx context.Context, l *Lease) (context.Context, func()) {
	return s.keepRenewed(ctx, l)
}

// keepRenewed renews l every TTL/3 until stop is called; if the lease is lost, the returned
// context is cancelled with ErrLeaseLost as its cause so the work stops.
func (s *Store) keepRenewed(ctx context.Context, l *Lease) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Renew(ctx, l); errors.Is(err, ErrLeaseLost) {
					cancel(ErrLeaseLost)
					return
				}
			}
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// QuarantineOver answers "is the quarantine over?" for a key whose downstream first said not
// found at notFoundAt: true once a quarantine has passed since, so that a second not-found now
// proves the earlier attempt never arrived and the key may be executed. nil (no not-found
// recorded yet) is false. Drive decides by it, and so does an operator's replay preview.
func (s *Store) QuarantineOver(notFoundAt *time.Time) bool {
	return quarantineOver(notFoundAt, s.cfg.Quarantine)
}

// QuarantineEnds is when the quarantine after a first not-found at notFoundAt is over.
func (s *Store) QuarantineEnds(notFoundAt time.Time) time.Time {
	return notFoundAt.Add(s.cfg.Quarantine)
}

// holdThroughQuarantine records a first not-found while keeping the lease (Drive's keepRenewed
// renews it meanwhile) and waits until the quarantine has passed since it, so that the holder
// itself takes the second look. ErrLeaseLost or ctx's error when the wait is cut short.
func (s *Store) holdThroughQuarantine(ctx context.Context, l *Lease) error {
	first := time.Now()
	if l.NotFoundAt != nil {
		first = *l.NotFoundAt
	}
	if err := s.holderWrite(ctx, nil, l, "record not-found", `not_found_at = COALESCE(not_found_at, now())`, nil,
		"downstream_not_found", detailJSON("quarantine_s", s.cfg.Quarantine.Seconds(), "attempt", l.Attempt, "held", true)); err != nil {
		return err
	}
	l.NotFoundAt = &first
	t := time.NewTimer(time.Until(s.QuarantineEnds(first)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
			return fmt.Errorf("wait out the quarantine %s: %w", l.Digest, ErrLeaseLost)
		}
		return fmt.Errorf("wait out the quarantine %s: %w", l.Digest, ctx.Err())
	}
}
