package console

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// Errors the console's own methods return, each with its kind (package errs). The kind decides
// the HTTP status and the public message in errs' one table; a Sentence is shown alone, the
// others with the context wrapped around them. Bad input is an *errs.FieldError naming the
// field (inputErr), a guard's refusal an *errs.RefusedError (refused); sign-in, session and
// scope errors are access's.
var (
	// ErrForbidden: the operator's role does not allow the action.
	ErrForbidden = errs.Sentence(errs.Forbidden, "not allowed for your role")
	// ErrNotFound: no such thing, or one the operator may not see (the two are not told apart);
	// the same sentinel as access's, so a missing route object and one out of scope look alike.
	ErrNotFound = access.ErrNotFound
	// ErrTooLarge: an upload is over its size limit.
	ErrTooLarge = errs.New(errs.TooLarge, "upload too large")
)

// inputErr is bad input naming its field (400).
func inputErr(field, format string, args ...any) error { return errs.Fieldf(field, format, args...) }

// refused is a guard's refusal (409) with the reason an operator can act on.
func refused(format string, args ...any) error { return errs.Refusedf(format, args...) }

// isRefusal reports whether err is a guard's refusal (any package's).
func isRefusal(err error) bool {
	var re *errs.RefusedError
	return errors.As(err, &re)
}

// isFieldError reports whether err is bad input naming a field (any package's).
func isFieldError(err error) bool {
	var fe *errs.FieldError
	return errors.As(err, &fe)
}

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

// storedPhrase is a text stored with its phrase: the phrase when there is one, else the text
// (looked up whole when shown) of a row stored before phrases were.
func storedPhrase(p errs.NullPhrase, text *string) errs.Phrase {
	switch {
	case p.Valid:
		return p.Phrase
	case text != nil:
		return errs.Verbatim(*text)
	}
	return errs.Phrase{}
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

// roleNeeded says which role a refused action needs: a 403 page (and the API's error) names it
// rather than only "not allowed". Each is ErrForbidden too (errors.Is).
var roleNeeded = map[access.Role]error{
	access.RoleViewer:   errs.Sentence(errs.Forbidden, "not allowed for your role: this needs the viewer role or higher"),
	access.RoleOperator: errs.Sentence(errs.Forbidden, "not allowed for your role: this needs the operator or admin role"),
	access.RoleAdmin:    errs.Sentence(errs.Forbidden, "not allowed for your role: this needs the admin role"),
}

// forbiddenBelow is the refusal of an action whose route needs role min.
func forbiddenBelow(min access.Role) error {
	if e, ok := roleNeeded[min]; ok {
		return fmt.Errorf("%w: %w", e, ErrForbidden)
	}
	return ErrForbidden
}
