package claim

import (
	"context"
	"encoding/json"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemops/idemops/errs"
)

// A bug in an Operation (an index out of range on a short key, a nil map) must not take the
// process down with it: the daemon's workers, the console's replays and a consumer's workers all
// drive Operations through Drive, and a panic there would kill every key in flight with it. Drive
// recovers a panic of Lookup, Execute or Apply where it happens and treats it as what it is, an
// unknown outcome: a panicking Lookup is a lookup that could not answer (the key is parked and,
// after a few tries, flagged); a panicking Execute or Apply may follow an action downstream, so
// the key is held for an operator. Drive then answers an error wrapping ErrOperationPanicked,
// naming the panic's type (its value may hold request data, so it is never logged or stored).

// ErrOperationPanicked: an Operation's Lookup, Execute or Apply panicked; Drive recovered it and
// parked or held the key.
var ErrOperationPanicked = errs.New(errs.Internal, "operation panicked")

// PanicError is a recovered panic: the method that panicked and the type of its value.
type PanicError struct {
	Method string // "lookup", "execute", "apply", "send", …
	Type   string // fmt's %T of the panic's value, e.g. runtime.boundsError
}

func (e *PanicError) Error() string { return fmt.Sprintf("%s panicked (%s)", e.Method, e.Type) }

// Unwrap makes a PanicError an ErrOperationPanicked.
func (e *PanicError) Unwrap() error { return ErrOperationPanicked }

// RecoveredPanic turns the value a deferred recover() returned into a *PanicError for method (nil
// when there was no panic). Use it in a defer around code that calls into an Operation or a
// Sender: `defer func() { if p := claim.RecoveredPanic("send", recover()); p != nil { err = p } }()`.
func RecoveredPanic(method string, r any) *PanicError {
	if r == nil {
		return nil
	}
	return &PanicError{Method: method, Type: fmt.Sprintf("%T", r)}
}

// LookupSafely is op.Lookup with a panic recovered as a *PanicError (a lookup that could not
// answer): for a read-only lookup outside Drive (an operator's preview or downstream check).
func LookupSafely(ctx context.Context, op Operation, l *Lease) (*Document, error) {
	return lookupSafely(ctx, op, l)
}

func lookupSafely(ctx context.Context, op Operation, l *Lease) (doc *Document, err error) {
	defer func() {
		if p := RecoveredPanic("lookup", recover()); p != nil {
			doc, err = nil, p
		}
	}()
	return op.Lookup(ctx, l)
}

func executeSafely(ctx context.Context, op Operation, l *Lease) (doc *Document, err error) {
	defer func() {
		if p := RecoveredPanic("execute", recover()); p != nil {
			doc, err = nil, p
		}
	}()
	return op.Execute(ctx, l)
}

func applySafely(ctx context.Context, op Operation, tx *gorm.DB, l *Lease, doc *Document) (snap *Snapshot, err error) {
	defer func() {
		if p := RecoveredPanic("apply", recover()); p != nil {
			snap, err = nil, p
		}
	}()
	return op.Apply(ctx, tx, l, doc)
}

// OutcomeUnknownAnswer is the answer a held key replays to every retry when the outcome of its
// attempt outside is unknown and only an operator can tell (problem+json, 500): detail says why.
func OutcomeUnknownAnswer(detail string) *Snapshot {
	body, _ := json.Marshal(map[string]any{"type": "about:blank", "title": "Outcome unknown", "status": 500, "detail": detail})
	return &Snapshot{Status: 500, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: body}
}

// holdPanicked holds a key whose Operation panicked in Execute or Apply (it may have acted
// downstream) and returns the error Drive answers.
func (s *Store) holdPanicked(ctx context.Context, l *Lease, p *PanicError) error {
	f := HeldFailure("panic", p.Error(), OutcomeUnknownAnswer(
		"an attempt with this key stopped on an internal error after it may have acted; it is held for an operator to resolve"))
	if err := s.Fail(context.WithoutCancel(ctx), nil, l, f); err != nil {
		return fmt.Errorf("%s %s: %w (and holding the key failed: %v)", p.Method, l.Digest, p, err)
	}
	s.cfg.Logger.Error("operation panicked; key held for an operator", "digest", l.Digest, "method", p.Method, "panic_type", p.Type)
	return fmt.Errorf("%s: %w", l.Digest, p)
}
