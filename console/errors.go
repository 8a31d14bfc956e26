package console

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/retention"
)

// Errors the console's methods return. statusOf maps them to HTTP statuses in one place.
var (
	// ErrUnauthenticated: no valid session or token (pages redirect to /login, the API answers 401).
	ErrUnauthenticated = errors.New("sign-in required")
	// ErrForbidden: the operator's role does not allow the action.
	ErrForbidden = errors.New("not allowed for your role")
	// ErrCSRF: a state-changing form arrived without the session's token.
	ErrCSRF = errors.New("missing or wrong form token; reload the page and try again")
	// ErrNotFound: no such thing, or one the operator may not see (the two are not told apart).
	ErrNotFound = errors.New("not found")
	// ErrInvalidInput: a field of a form or query is malformed (see InputError).
	ErrInvalidInput = errors.New("invalid input")
	// ErrThrottled: too many failed sign-ins for this user or address.
	ErrThrottled = errors.New("too many failed sign-ins; try again later")
	// ErrBadCredentials: wrong name or password, or a disabled operator.
	ErrBadCredentials = errors.New("wrong name or password")
	// ErrConflict: the thing already exists (an operator name).
	ErrConflict = errors.New("already exists")
	// ErrRefused: a guard refused the action in the target's current state (see RefusedError).
	ErrRefused = errors.New("refused")
	// ErrTooLarge: an upload is over its size limit.
	ErrTooLarge = errors.New("upload too large")
)

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

// statusOf is the one mapping from errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrBadCredentials):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden), errors.Is(err, ErrCSRF):
		return http.StatusForbidden
	case errors.Is(err, ErrNotFound), errors.Is(err, claim.ErrNotFound), errors.Is(err, retention.ErrPolicyNotFound),
		errors.Is(err, reconcile.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrInvalidInput), errors.Is(err, claim.ErrInvalidKey), errors.Is(err, claim.ErrInvalidScope),
		errors.Is(err, claim.ErrInvalidHold), retention.IsInputError(err), errors.Is(err, reconcile.ErrInvalid),
		errors.Is(err, reconcile.ErrUnknownFormat), errors.Is(err, reconcile.ErrProfile):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge), errors.Is(err, reconcile.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, reconcile.ErrMalformed), errors.Is(err, reconcile.ErrControlTotal), errors.Is(err, reconcile.ErrArchive):
		return http.StatusUnprocessableEntity
	case errors.Is(err, reconcile.ErrClosed), errors.Is(err, reconcile.ErrCannotRecover):
		return http.StatusConflict
	case errors.Is(err, ErrThrottled):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrConflict), errors.Is(err, ErrRefused):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

// publicMessage is what a user sees for err: the error itself for the kinds above, a plain
// sentence for anything unexpected (details go to the log only).
func publicMessage(err error) string {
	if statusOf(err) == http.StatusInternalServerError {
		return "Something went wrong on our side. The error was logged."
	}
	if errors.Is(err, claim.ErrNotFound) {
		return ErrNotFound.Error()
	}
	var re *RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Error()
	}
	var fe *claim.FieldError
	if errors.As(err, &fe) {
		return fe.Error()
	}
	var rie *retention.InputError
	if errors.As(err, &rie) {
		return rie.Error()
	}
	var le *reconcile.LineError
	if errors.As(err, &le) {
		return le.Error()
	}
	var cte *reconcile.ControlTotalError
	if errors.As(err, &cte) {
		return cte.Error()
	}
	if errors.Is(err, reconcile.ErrNotFound) || errors.Is(err, retention.ErrPolicyNotFound) {
		return ErrNotFound.Error()
	}
	for _, k := range []error{ErrUnauthenticated, ErrForbidden, ErrCSRF, ErrNotFound, ErrThrottled, ErrBadCredentials, ErrConflict} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return err.Error()
}
