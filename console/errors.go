package console

import (
	"context"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// Errors the console's methods return, each with its kind (package errs). The kind decides the
// HTTP status and the public message in errs' one table; a Sentence is shown alone, the others
// with the context wrapped around them.
var (
	// ErrUnauthenticated: no valid session or token (pages redirect to /login, the API answers 401).
	ErrUnauthenticated = errs.Sentence(errs.Unauthorized, "sign-in required")
	// ErrForbidden: the operator's role does not allow the action.
	ErrForbidden = errs.Sentence(errs.Forbidden, "not allowed for your role")
	// ErrCSRF: a state-changing form arrived without the session's token.
	ErrCSRF = errs.Sentence(errs.Forbidden, "missing or wrong form token; reload the page and try again")
	// ErrNotFound: no such thing, or one the operator may not see (the two are not told apart).
	ErrNotFound = errs.New(errs.NotFound, "not found")
	// ErrInvalidInput: a field of a form or query is malformed (see InputError).
	ErrInvalidInput = errs.New(errs.Invalid, "invalid input")
	// ErrThrottled: too many failed sign-ins for this user or address.
	ErrThrottled = errs.Sentence(errs.Throttled, "too many failed sign-ins; try again later")
	// ErrBadCredentials: wrong name or password, or a disabled operator.
	ErrBadCredentials = errs.Sentence(errs.Unauthorized, "wrong name or password")
	// ErrConflict: the thing already exists (an operator name).
	ErrConflict = errs.Sentence(errs.Conflict, "already exists")
	// ErrRefused: a guard refused the action in the target's current state (see RefusedError).
	ErrRefused = errs.New(errs.Conflict, "refused")
	// ErrTooLarge: an upload is over its size limit.
	ErrTooLarge = errs.New(errs.TooLarge, "upload too large")
)

// InputError names the field that was wrong. Why is the reason as a phrase the console shows in
// the operator's language; Reason is its English text.
type InputError struct {
	Field  string
	Reason string
	Why    errs.Phrase
}

func (e *InputError) Error() string { return e.Field + ": " + e.Reason }
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// ErrorKind is invalid; the error's text is what a user is shown.
func (e *InputError) ErrorKind() errs.Kind { return errs.Invalid }

// Phrasing is "field: reason".
func (e *InputError) Phrasing() errs.Phrase { return errs.FieldPhrase(e.Field, e.Why, e.Reason) }

func inputErr(field, format string, args ...any) error {
	why := errs.Phrasef(format, args...)
	return &InputError{Field: field, Reason: why.String(), Why: why}
}

// ErrorKind is the kind of the refusal (conflict, or forbidden); its reason is what a user is shown.
func (e *RefusedError) ErrorKind() errs.Kind { return errs.KindOf(e.Kind) }

// statusOf is the HTTP status for err, from the kind it carries (errs' table).
func statusOf(err error) int { return errs.Status(err) }

// publicMessage is what a user sees for err (errs.Message): the error's own words for the kinds a
// user can act on, a plain sentence for anything unexpected (details go to the log only).
func publicMessage(err error) string { return errs.Message(err) }

// say is a message made at run time (a notice naming a value, a reason) in the page's language
// (ctx's), through the catalog: say(ctx, "Token created for %s.", name). Its format must be a
// literal, so TestCatalog_CoversRuntimePhrases finds it.
func say(ctx context.Context, format string, args ...any) string {
	return templates.Say(ctx, errs.Phrasef(format, args...))
}

// storedText is a text stored with its phrase, in ctx's language: the phrase said when there is
// one, else the stored (English) text; "" for neither.
func storedText(ctx context.Context, p errs.NullPhrase, text *string) string {
	switch {
	case p.Valid:
		return templates.Say(ctx, p.Phrase)
	case text != nil:
		return *text
	}
	return ""
}

// pageMessage is publicMessage in the page's language (ctx's): when the message is the text of a
// phrase in err's chain (a field's error, a statement line's, a refusal, an errs.Errorf) it is
// said through the catalog with its values filled in; any other message is looked up whole.
// The JSON API, the probes and the CLI keep publicMessage, English.
func pageMessage(ctx context.Context, err error) string {
	msg := publicMessage(err)
	if p := errs.PhraseOf(err, msg); p.Valid {
		return templates.Say(ctx, p.Phrase)
	}
	return templates.SayText(ctx, msg)
}
