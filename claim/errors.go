package claim

import (
	"errors"
	"fmt"

	"github.com/idemops/idemops/errs"
)

// Errors a caller may need to tell apart. Each carries a kind (package errs), which the console
// and the CLI turn into a status or exit code by errs' one table; httpidem answers services with
// its own problem types.
var (
	// ErrInvalidKey: the key is empty, longer than 255 characters, or not printable ASCII.
	ErrInvalidKey = errs.New(errs.Invalid, "invalid idempotency key")
	// ErrInvalidScope: the tenant or operation is empty, too long, or holds a '|'.
	ErrInvalidScope = errs.New(errs.Invalid, "invalid tenant or operation")
	// ErrInvalidIntent: the request body is not a JSON object, or lacks a declared field.
	ErrInvalidIntent = errs.New(errs.Invalid, "invalid request intent")
	// ErrMismatch: the key was used before with a different intent.
	ErrMismatch = errs.New(errs.Conflict, "idempotency key reused with a different request")
	// ErrLeaseLost: the holder's lease was taken over (or the key changed); nothing was written.
	ErrLeaseLost = errs.New(errs.Conflict, "lease lost")
	// ErrNotFound: no key with that identity.
	ErrNotFound = errs.New(errs.NotFound, "idempotency key not found")
	// ErrNotReplayable: the key is not in a state the requested transition accepts.
	ErrNotReplayable = errs.New(errs.Conflict, "key not in a state that allows this")
	// ErrSnapshotTooLarge: a response body over the snapshot limit.
	ErrSnapshotTooLarge = errs.New(errs.TooLarge, "response snapshot too large")
)

// fieldErr is bad input naming the field (an *errs.FieldError), an instance of kind (one of the
// sentinels above).
func fieldErr(kind error, field, format string, args ...any) error {
	return errs.Fieldf(field, format, args...).Of(kind)
}

// Failure is an Operation's verdict that an attempt failed. Retryable failures leave the key
// failed_retryable (the next attempt with the same intent claims it again); final ones are
// replayed to every later request. Snapshot, when set, is the response to replay.
type Failure struct {
	Code      string
	Detail    string
	Retryable bool
	Snapshot  *Snapshot
	// Hold (retryable failures with a Snapshot only): whether anything happened outside the
	// database is unknown and nobody can look it up, so the key is held — its Snapshot is
	// replayed to every retry (Stripe stores a 500 and replays it) until an operator releases
	// the key for another attempt (ReleaseForRetry) or marks it final (MarkFinal).
	Hold bool
}

func (f *Failure) Error() string {
	kind := "final"
	if f.Retryable {
		kind = "retryable"
	}
	return fmt.Sprintf("%s failure %s: %s", kind, f.Code, f.Detail)
}

// FinalFailure builds a failure that must not be retried (invalid input, insufficient funds).
func FinalFailure(code, detail string, snap *Snapshot) *Failure {
	return &Failure{Code: code, Detail: detail, Snapshot: snap}
}

// RetryableFailure builds a failure that the next attempt may retry (timeouts, 5xx).
func RetryableFailure(code, detail string) *Failure {
	return &Failure{Code: code, Detail: detail, Retryable: true}
}

// HeldFailure builds a failure whose outcome outside is unknown: snap is replayed until an
// operator releases the key or marks it final.
func HeldFailure(code, detail string, snap *Snapshot) *Failure {
	return &Failure{Code: code, Detail: detail, Retryable: true, Snapshot: snap, Hold: true}
}

// asFailure sorts any error from Execute: a *Failure keeps its verdict; anything else is
// ambiguous (the call may have reached downstream), so it is retryable and the next attempt
// must look downstream up first.
func asFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Code: "execute_error", Detail: err.Error(), Retryable: true}
}
