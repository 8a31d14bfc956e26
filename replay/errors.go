package replay

import (
	"fmt"

	"github.com/idemops/idemops/errs"
)

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
}

func (e *RefusedError) Error() string { return e.Reason }
func (e *RefusedError) Unwrap() error { return e.Kind }

// ErrorKind is the refusal's kind (conflict or forbidden); its reason is what a user is shown.
func (e *RefusedError) ErrorKind() errs.Kind { return errs.KindOf(e.Kind) }

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...), Kind: ErrRefused}
}

// InputError names the field that was wrong.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Reason }
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// ErrorKind is invalid; the error's text is what a user is shown.
func (e *InputError) ErrorKind() errs.Kind { return errs.Invalid }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
