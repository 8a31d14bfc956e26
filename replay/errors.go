package replay

import "github.com/idemops/idemops/errs"

// Errors the workflow returns, each with its kind (package errs decides status and exit code).
var (
	// ErrRefused: a guard refused the action in the key's or request's current state (see
	// RefusedError for the reason).
	ErrRefused = errs.New(errs.Conflict, "refused")
	// ErrForbidden: the actor may not do this (approving their own request).
	ErrForbidden = errs.New(errs.Forbidden, "not allowed")
	// ErrInvalidInput: a field of the confirmation is malformed (see InputError).
	ErrInvalidInput = errs.New(errs.Invalid, "invalid input")
	// ErrNotFound: no such request or run.
	ErrNotFound = errs.New(errs.NotFound, "not found")
)

// RefusedError is a guard's refusal with the reason an operator can act on. Kind is ErrRefused
// or ErrForbidden.
type RefusedError struct {
	Reason string
	Kind   error
	Why    errs.Phrase // Reason as a phrase, for a console that speaks another language
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

// ErrorKind is the refusal's kind (conflict or forbidden); its reason is what a user is shown.
func (e *RefusedError) ErrorKind() errs.Kind { return errs.KindOf(e.Kind) }

func refused(format string, args ...any) error {
	why := errs.Phrasef(format, args...)
	return &RefusedError{Reason: why.String(), Kind: ErrRefused, Why: why}
}

// InputError names the field that was wrong.
type InputError struct {
	Field  string
	Reason string
	Why    errs.Phrase // Reason as a phrase, for a console that speaks another language
}

// Phrasing is "field: reason".
func (e *InputError) Phrasing() errs.Phrase { return errs.FieldPhrase(e.Field, e.Why, e.Reason) }

func (e *InputError) Error() string { return e.Field + ": " + e.Reason }
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// ErrorKind is invalid; the error's text is what a user is shown.
func (e *InputError) ErrorKind() errs.Kind { return errs.Invalid }

func inputErr(field, format string, args ...any) error {
	why := errs.Phrasef(format, args...)
	return &InputError{Field: field, Reason: why.String(), Why: why}
}
