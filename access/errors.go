package access

import "github.com/idemops/idemops/errs"

// Errors the methods of this package return, each with its kind (package errs). Bad input is an
// *errs.FieldError naming the field; a guard's refusal an *errs.RefusedError (Conflict, or
// Forbidden for a tenant the actor may not grant or an object it may only see).
var (
	// ErrNotFound: no such operator, or one outside the actor's tenants (not told apart).
	ErrNotFound = errs.New(errs.NotFound, "not found")
	// ErrUnauthenticated: no valid session or token.
	ErrUnauthenticated = errs.Sentence(errs.Unauthorized, "sign-in required")
	// ErrBadCredentials: wrong name or password, or a disabled operator.
	ErrBadCredentials = errs.Sentence(errs.Unauthorized, "wrong name or password")
	// ErrThrottled: too many failed sign-ins for this name or address (see ThrottledError).
	ErrThrottled = errs.Sentence(errs.Throttled, "too many failed sign-ins; try again later")
	// ErrConflict: the thing already exists (an operator name).
	ErrConflict = errs.Sentence(errs.Conflict, "already exists")
	// ErrCSRF: a state-changing form arrived without the session's token.
	ErrCSRF = errs.Sentence(errs.Forbidden, "missing or wrong form token; reload the page and try again")
	// ErrSSORefused: single sign-on let nobody in; the *errs.RefusedError says why.
	ErrSSORefused = errs.New(errs.Unauthorized, "single sign-on refused")
)

// fieldErr is bad input naming its field.
func fieldErr(field, format string, args ...any) error { return errs.Fieldf(field, format, args...) }

// refused is a guard's refusal (Conflict) with the reason an operator can act on.
func refused(format string, args ...any) error { return errs.Refusedf(format, args...) }

// ssoRefused is a single sign-on refusal with the reason shown on the sign-in page.
func ssoRefused(format string, args ...any) error {
	return errs.Refused(errs.Unauthorized, errs.Phrasef(format, args...)).Of(ErrSSORefused)
}
