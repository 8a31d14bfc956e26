// Package errs is idemops' one vocabulary of error kinds, the way github.com/benbjohnson/wtf
// does it: every package declares its errors once (claim.ErrNotFound, reconcile.ErrInvalid, …)
// and each carries one of the few kinds below. What a kind means at the edges — the HTTP
// status, the problem type, the message a user is shown, the CLI's exit code — is decided here,
// in one table, and nowhere else; the console and the CLI only look it up.
//
// It is not under internal/: claim's errors carry a kind, and claim (with httpidem, grpcidem and
// consume) is imported by services outside this module, which may ask KindOf too.
package errs

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Kind is the class of an error: what the caller did wrong, or that nothing the caller did was.
type Kind uint8

// The kinds. Internal is the zero value: an error nobody classified is a failure on our side.
const (
	// Internal: unexpected (a bug, a database that went away); details go to the log only.
	Internal Kind = iota
	// Invalid: bad input — a field, flag or argument, or a file named by one that is missing or
	// unreadable. The message names what was wrong.
	Invalid
	// NotFound: no such thing, or one the caller may not see (the two are not told apart).
	NotFound
	// Conflict: the thing is not in a state that allows this (already exists, changed since it
	// was read, already closed).
	Conflict
	// Forbidden: the caller is known but may not do this.
	Forbidden
	// Unauthorized: the caller is not known (no or wrong credentials).
	Unauthorized
	// TooLarge: input over its size limit.
	TooLarge
	// Unprocessable: well-formed input refused whole for what it says (a statement whose rows do
	// not parse or do not add up). The run that met it failed; it is not a usage mistake.
	Unprocessable
	// Throttled: too many attempts; try again later.
	Throttled
	// Unavailable: something this depends on is not there now (a channel, a statement not yet
	// published); trying again later may work.
	Unavailable
)

// meaning is a kind at the edges.
type meaning struct {
	typ     string // problem type (and the kind's name)
	status  int    // HTTP status
	exit    int    // CLI exit code: 2 the command as given cannot succeed (bad input), 1 it failed
	message string // fixed public message; "" shows the error's own text (see Message)
}

// table is the one place a kind becomes a status, a problem type, a message and an exit code.
var table = [...]meaning{
	Internal:      {"internal", http.StatusInternalServerError, 1, "Something went wrong on our side. The error was logged."},
	Invalid:       {"invalid", http.StatusBadRequest, 2, ""},
	NotFound:      {"not-found", http.StatusNotFound, 2, "not found"},
	Conflict:      {"conflict", http.StatusConflict, 2, ""},
	Forbidden:     {"forbidden", http.StatusForbidden, 1, ""},
	Unauthorized:  {"unauthorized", http.StatusUnauthorized, 1, ""},
	TooLarge:      {"too-large", http.StatusRequestEntityTooLarge, 1, ""},
	Unprocessable: {"unprocessable", http.StatusUnprocessableEntity, 1, ""},
	Throttled:     {"throttled", http.StatusTooManyRequests, 1, ""},
	Unavailable:   {"unavailable", http.StatusServiceUnavailable, 1, ""},
}

func (k Kind) meaning() meaning {
	if int(k) < len(table) {
		return table[k]
	}
	return table[Internal]
}

// String is the kind's name, also its problem type: "not-found".
func (k Kind) String() string { return k.meaning().typ }

// Status is the HTTP status that answers an error of this kind.
func (k Kind) Status() int { return k.meaning().status }

// Exit is the CLI's exit code for an error of this kind: 2 for bad input — the command as given
// cannot succeed (invalid, not found, conflicts with what exists) —, 1 for a failure.
func (k Kind) Exit() int { return k.meaning().exit }

// Kinded is an error that carries a kind: a sentinel made by New or Sentence, or a package's
// typed error (a FieldError, a RefusedError, reconcile.LineError, …) that names its kind.
type Kinded interface {
	error
	ErrorKind() Kind
}

// Error is a sentinel with a kind. Compare with errors.Is; wrap with fmt.Errorf("…: %w", err).
type Error struct {
	kind     Kind
	text     string
	sentence bool
}

// New returns a sentinel of kind k whose text names the kind ("invalid", "cannot recover"); the
// context a caller wraps around it completes the message, so a user is shown the whole text.
func New(k Kind, text string) *Error { return &Error{kind: k, text: text} }

// Sentence returns a sentinel whose text is a whole sentence for a user ("not allowed for your
// role"): Message shows it alone, whatever context wraps it (the context reaches the log only).
func Sentence(k Kind, text string) *Error { return &Error{kind: k, text: text, sentence: true} }

func (e *Error) Error() string { return e.text }

// ErrorKind is the sentinel's kind.
func (e *Error) ErrorKind() Kind { return e.kind }

// KindOf is the kind of the outermost error in err's chain that carries one; Unavailable for an
// error meaning the database could not be reached (see Unreachable); Internal otherwise (and for
// nil, which callers test first).
func KindOf(err error) Kind {
	var k Kinded
	if errors.As(err, &k) {
		return k.ErrorKind()
	}
	if isUnreachable(err) {
		return Unavailable
	}
	return Internal
}

// unreachable recognises the driver's errors that mean the database could not be reached at all
// (the connection refused or lost mid-statement, a standby being promoted): nothing the caller did
// and nothing wrong with the request, so a 503 that a retry later may cure, not a 500. claim, which
// knows its driver's errors (claim.ConnLost), sets it when it is loaded.
var unreachable atomic.Pointer[func(error) bool]

// Unreachable sets how an error meaning "the database could not be reached" is recognised.
func Unreachable(f func(error) bool) { unreachable.Store(&f) }

func isUnreachable(err error) bool {
	f := unreachable.Load()
	return f != nil && (*f)(err)
}

// unreachableMessage is what a user is shown for an unreachable database: the driver's text names
// hosts and ports, which go to the log only.
const unreachableMessage = "The database cannot be reached right now (a failover may be in progress). Try again shortly."

// Status is the HTTP status for err (200 for nil).
func Status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return KindOf(err).Status()
}

// Exit is the CLI's exit code for err (0 for nil).
func Exit(err error) int {
	if err == nil {
		return 0
	}
	return KindOf(err).Exit()
}

// Message is what a user may be shown for err. A kind with a fixed message gets it (Internal's
// plain sentence — the details go to the log —, NotFound's "not found", which does not tell
// missing from hidden). Otherwise the outermost error that carries a kind decides: a typed error
// or a Sentence is shown alone (without the context wrapped around it); a sentinel made by New
// is shown with its context, the whole text.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var k Kinded
	if !errors.As(err, &k) {
		if isUnreachable(err) {
			return unreachableMessage
		}
		return table[Internal].message
	}
	if m := k.ErrorKind().meaning().message; m != "" {
		return m
	}
	if e, ok := k.(*Error); ok && !e.sentence {
		return err.Error()
	}
	return k.Error()
}

// Phrase is a text for a user as a format and its arguments, so that an edge speaking another
// language can look Format up in its catalog and fill in the same arguments (in its own word
// order: a translation may use explicit indexes, %[2]s). String is the English text, the one
// Message, the JSON API and the CLI show. An argument may itself be a Phrase (a reason inside a
// field's frame), an error, or a time.Time (written as UTC, 2006-01-02 15:04:05Z, in English).
type Phrase struct {
	Format string
	Args   []any
}

// Phrasef is the phrase of format and args (fmt.Sprintf's verbs).
func Phrasef(format string, args ...any) Phrase { return Phrase{Format: format, Args: args} }

// Verbatim is a phrase of fixed text (no verbs: a % in s is kept as is).
func Verbatim(s string) Phrase { return Phrase{Format: strings.ReplaceAll(s, "%", "%%")} }

// String is the phrase in English.
func (p Phrase) String() string {
	args := make([]any, len(p.Args))
	for i, a := range p.Args {
		switch v := a.(type) {
		case Phrase:
			args[i] = v.String()
		case time.Time:
			args[i] = v.UTC().Format("2006-01-02 15:04:05Z")
		default:
			args[i] = a
		}
	}
	return fmt.Sprintf(p.Format, args...)
}

// Phrased is an error whose text a user is shown is a Phrase (Error returns its String): a
// package's typed error — a field error, a statement line error, a refusal — so the console can
// show it in the operator's language.
type Phrased interface {
	error
	Phrasing() Phrase
}

// Errorf is fmt.Errorf — same text, same chain for errors.Is and KindOf — whose text is also a
// phrase: the format with each %w read as %s, each wrapped error a phrase of its own (a
// sentinel's text, looked up whole). For errors that wrap a sentinel with context a user is
// shown: errs.Errorf("finding %d is %s: %w", id, state, ErrClosed).
func Errorf(format string, args ...any) error {
	p := Phrase{Format: strings.ReplaceAll(format, "%w", "%s"), Args: make([]any, len(args))}
	for i, a := range args {
		switch v := a.(type) {
		case Phrased:
			p.Args[i] = v.Phrasing()
		case error:
			p.Args[i] = Verbatim(v.Error())
		default:
			p.Args[i] = a
		}
	}
	return &phrasedError{err: fmt.Errorf(format, args...), why: p}
}

type phrasedError struct {
	err error
	why Phrase
}

func (e *phrasedError) Error() string    { return e.err.Error() }
func (e *phrasedError) Unwrap() error    { return e.err }
func (e *phrasedError) Phrasing() Phrase { return e.why }
