package replay

import (
	"errors"
	"fmt"
)

// Errors the workflow returns. The console maps them to HTTP statuses.
var (
	// ErrRefused: a guard refused the action in the key's or request's current state (see
	// RefusedError for the reason).
	ErrRefused = errors.New("refused")
	// ErrForbidden: the actor may not do this (approving their own request).
	ErrForbidden = errors.New("not allowed")
	// ErrInvalidInput: a field of the confirmation is malformed (see InputError).
	ErrInvalidInput = errors.New("invalid input")
	// ErrNotFound: no such request or run.
	ErrNotFound = errors.New("not found")
)

// RefusedError is a guard's refusal with the reason an operator can act on. Kind is ErrRefused
// or ErrForbidden.
type RefusedError struct {
	Reason string
	Kind   error
}

func (e *RefusedError) Error() string { return e.Reason }
func (e *RefusedError) Unwrap() error { return e.Kind }

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

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
