package errs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/idemops/idemops/errs"
)

// fieldError is a package's typed error: it names its kind and its text is the message.
type fieldError struct{ field string }

func (e *fieldError) Error() string        { return e.field + ": required" }
func (e *fieldError) Unwrap() error        { return errInvalid }
func (e *fieldError) ErrorKind() errs.Kind { return errs.Invalid }

var (
	errInvalid   = errs.New(errs.Invalid, "invalid")
	errNotFound  = errs.New(errs.NotFound, "idempotency key not found")
	errClosed    = errs.New(errs.Conflict, "finding already closed")
	errForbidden = errs.Sentence(errs.Forbidden, "not allowed for your role")
)

func TestKinds_OneTableDecidesStatusTypeExitAndMessage(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		kind    errs.Kind
		status  int
		exit    int
		message string
	}{
		{"a sentinel shows its context", fmt.Errorf("%w: cron_spec: 6 fields", errInvalid), errs.Invalid, 400, 2, "invalid: cron_spec: 6 fields"},
		{"a sentinel wrapped by a caller", fmt.Errorf("finding 4: %w", errClosed), errs.Conflict, 409, 2, "finding 4: finding already closed"},
		{"a typed error is shown alone", fmt.Errorf("save: %w", &fieldError{"reason"}), errs.Invalid, 400, 2, "reason: required"},
		{"a sentence is shown alone", fmt.Errorf("role viewer: %w", errForbidden), errs.Forbidden, 403, 1, "not allowed for your role"},
		{"not found never says what was missing", fmt.Errorf("key 7: %w", errNotFound), errs.NotFound, 404, 2, "not found"},
		{"the outermost kind wins", fmt.Errorf("%w: %w", errNotFound, errInvalid), errs.NotFound, 404, 2, "not found"},
		{"an unclassified error is internal", fmt.Errorf("query: %w", context.DeadlineExceeded), errs.Internal, 500, 1, "Something went wrong on our side. The error was logged."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errs.KindOf(tt.err); got != tt.kind {
				t.Errorf("KindOf = %v; want %v", got, tt.kind)
			}
			if got := errs.Status(tt.err); got != tt.status {
				t.Errorf("Status = %d; want %d", got, tt.status)
			}
			if got := errs.Exit(tt.err); got != tt.exit {
				t.Errorf("Exit = %d; want %d", got, tt.exit)
			}
			if got := errs.Message(tt.err); got != tt.message {
				t.Errorf("Message = %q; want %q", got, tt.message)
			}
		})
	}
}

func TestKinds_SentinelsStayComparable(t *testing.T) {
	err := fmt.Errorf("x: %w", &fieldError{"y"})
	if !errors.Is(err, errInvalid) || errors.Is(err, errClosed) {
		t.Error("errors.Is must see the sentinel a typed error wraps, and only it")
	}
	if errs.Status(nil) != http.StatusOK || errs.Exit(nil) != 0 || errs.Message(nil) != "" {
		t.Error("nil is success")
	}
}

func TestKinds_EveryKindHasANameStatusAndExit(t *testing.T) {
	seen := map[string]bool{}
	for k := errs.Internal; k <= errs.Unavailable; k++ {
		if k.String() == "" || seen[k.String()] || k.Status() < 400 || (k.Exit() != 1 && k.Exit() != 2) {
			t.Errorf("kind %d: type %q, status %d, exit %d", k, k, k.Status(), k.Exit())
		}
		seen[k.String()] = true
	}
	if k := errs.Kind(200); k.Status() != 500 || k.String() != "internal" {
		t.Errorf("an unknown kind is internal, got %v %d", k, k.Status())
	}
}
