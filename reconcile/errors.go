package reconcile

import (
	"fmt"

	"github.com/idemops/idemops/errs"
)

// The errors this package's parsers return, each with its kind (package errs); test with errors.Is.
var (
	// ErrMalformed: a row of the statement does not parse. The error is a *LineError naming
	// the physical line.
	ErrMalformed = errs.New(errs.Unprocessable, "malformed statement")
	// ErrControlTotal: the detail rows do not add up to the statement's own control totals; the
	// statement must be rejected whole. The error is a *ControlTotalError.
	ErrControlTotal = errs.New(errs.Unprocessable, "CONTROL_TOTAL")
	// ErrTooLarge: the statement (or one line of it) exceeds the size limit.
	ErrTooLarge = errs.New(errs.TooLarge, "statement too large")
	// ErrUnknownFormat: ParserFor was given a name Formats does not list.
	ErrUnknownFormat = errs.New(errs.Invalid, "unknown statement format")
	// ErrProfile: a CSV profile is missing or invalid.
	ErrProfile = errs.New(errs.Invalid, "invalid statement profile")
)

// LineError is a statement row that does not parse. Its text is `line N: reason`.
type LineError struct {
	Line   int // physical line number in the file, 1-based
	Reason string
	Err    error // the kind: ErrMalformed unless set (ErrTooLarge for an overlong line)
	// File names the file of a statement that comes as several (Alipay's 汇总), "" for the
	// detail: the text becomes `汇总 line N: reason`.
	File string
	// Why is Reason as a phrase, for a console that speaks another language.
	Why errs.Phrase
}

// Phrasing is the error's text as a phrase: "line N: reason" (or "汇总 line N: reason").
func (e *LineError) Phrasing() errs.Phrase {
	why := e.Why
	if why.Format == "" {
		why = errs.Verbatim(e.Reason)
	}
	if e.File != "" {
		return errs.Phrasef("%s line %d: %s", e.File, e.Line, why)
	}
	return errs.Phrasef("line %d: %s", e.Line, why)
}

func (e *LineError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("%s line %d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// Unwrap gives the error's kind, so errors.Is(err, ErrMalformed) finds it.
func (e *LineError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrMalformed
}

// ErrorKind is the kind of the error it wraps (unprocessable, or too large); its text is what a user
// is shown.
func (e *LineError) ErrorKind() errs.Kind { return errs.KindOf(e.Unwrap()) }

func lineErrorf(line int, format string, args ...any) error {
	why := errs.Phrasef(format, args...)
	return &LineError{Line: line, Reason: why.String(), Why: why}
}

// ControlTotalError rejects a statement whose details do not add up to its control totals.
// Totals holds stated and computed values so a caller can record the mismatch as a finding.
type ControlTotalError struct {
	Totals *ControlTotals
}

func (e *ControlTotalError) Error() string {
	return fmt.Sprintf("line %d: CONTROL_TOTAL: details do not add up to the %s: %s",
		e.Totals.Line, e.Totals.Source, e.Totals.Mismatches())
}

func (e *ControlTotalError) Is(target error) bool { return target == ErrControlTotal }

// ErrorKind is ErrControlTotal's; the error's text is what a user is shown.
func (e *ControlTotalError) ErrorKind() errs.Kind { return ErrControlTotal.ErrorKind() }

// The errors the import, matching, resolution and scheduling side returns.
var (
	// ErrNotFound: no recon job, run or finding with that name or id.
	ErrNotFound = errs.New(errs.NotFound, "not found")
	// ErrInvalid: a recon job, filter or request field is invalid; the message names the field.
	ErrInvalid = errs.New(errs.Invalid, "invalid")
	// ErrNotReady: the channel has not published the statement yet (a missing file, HTTP 404).
	ErrNotReady = errs.New(errs.Unavailable, "statement not ready")
	// ErrFetch: the statement could not be fetched (HTTP error, unreadable file).
	ErrFetch = errs.New(errs.Unavailable, "statement fetch failed")
	// ErrClosed: the finding is already resolved or ignored.
	ErrClosed = errs.New(errs.Conflict, "finding already closed")
	// ErrNotClosed: the finding is open; only a resolved or ignored one can be reopened.
	ErrNotClosed = errs.New(errs.Conflict, "finding is open")
	// ErrCannotRecover: recover does not apply to this finding or its key; the message says why.
	ErrCannotRecover = errs.New(errs.Conflict, "cannot recover")
	// ErrNameTaken: a recon job of that name exists (an *errs.FieldError of "name" under it, bad
	// input like ErrInvalid): the console answers it generically when the operator cannot see
	// that job.
	ErrNameTaken = errs.New(errs.Invalid, "name taken")
)

// invalidf is bad input naming the field: an *errs.FieldError under ErrInvalid as its context,
// "invalid: field: reason" (errors.Is ErrInvalid; errors.As *errs.FieldError).
func invalidf(field, format string, args ...any) error {
	return invalidWhy(field, errs.Phrasef(format, args...))
}

// invalidWhy is invalidf with the reason as a phrase already made.
func invalidWhy(field string, why errs.Phrase) error {
	return errs.Errorf("%w: %w", ErrInvalid, errs.Field(field, why))
}
