package retention

import (
	"errors"

	"github.com/idemops/idemops/errs"
)

// Errors a caller may need to tell apart, each with its kind (package errs: invalid is HTTP 400
// and exit 2, not found 404).
var (
	// ErrInvalidPolicy: a policy or floor value that is malformed (negative, not whole seconds,
	// keep-response longer than keep-key, unknown state, bad operation name).
	ErrInvalidPolicy = errs.New(errs.Invalid, "invalid retention policy")
	// ErrBelowFloor: a keep-key period shorter than the floor (retry window + back-fill window +
	// reconciliation lag), or a floor raised above an existing policy.
	ErrBelowFloor = errs.New(errs.Invalid, "retention period below the floor")
	// ErrPolicyNotFound: no policy for that operation and state.
	ErrPolicyNotFound = errs.New(errs.NotFound, "retention policy not found")
	// ErrInvalidOptions: bad purge options or job parameters.
	ErrInvalidOptions = errs.New(errs.Invalid, "invalid purge options")
	// ErrTooManyTimeouts: a purge phase kept timing out even at the smallest batch.
	ErrTooManyTimeouts = errs.New(errs.Unavailable, "purge batches keep timing out")
)

// inputErr is bad input naming the field (an *errs.FieldError), an instance of kind (one of the
// errors above).
func inputErr(kind error, field, format string, args ...any) error {
	return errs.Fieldf(field, format, args...).Of(kind)
}

// IsInputError reports whether err is bad input from the caller (HTTP 400, exit 2).
func IsInputError(err error) bool {
	return errors.Is(err, ErrInvalidPolicy) || errors.Is(err, ErrBelowFloor) || errors.Is(err, ErrInvalidOptions)
}
