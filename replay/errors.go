package replay

import "github.com/idemops/idemops/errs"

// Errors the workflow returns, each with its kind (package errs decides status and exit code).
// Bad input is an *errs.FieldError naming the field; a guard's refusal an *errs.RefusedError
// saying why (Conflict, or Forbidden for approving one's own request).
var (
	// ErrNotFound: no such request or run.
	ErrNotFound = errs.New(errs.NotFound, "not found")
)

func inputErr(field, format string, args ...any) error { return errs.Fieldf(field, format, args...) }

func refused(format string, args ...any) error { return errs.Refusedf(format, args...) }
