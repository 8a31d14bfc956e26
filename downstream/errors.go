package downstream

import (
	"fmt"

	"github.com/idemops/idemops/errs"
)

// Errors a caller may need to tell apart.
var (
	// ErrDuplicateOperation: Register met a name that is already registered.
	ErrDuplicateOperation = errs.New(errs.Conflict, "operation already registered")
	// ErrUnknownOperation: Get found no operation by that name.
	ErrUnknownOperation = errs.New(errs.NotFound, "unknown operation")
	// ErrInvalidConfig: an operations file (or OperationConfig) is wrong; see ConfigError.
	ErrInvalidConfig = errs.New(errs.Invalid, "invalid downstream config")
)

// ConfigError names the file, the field (a path like operations[0].lookup.url) and the
// problem. It wraps ErrInvalidConfig.
type ConfigError struct {
	File    string
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	s := e.Problem
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if e.File != "" {
		s = e.File + ": " + s
	}
	return s
}

func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// ErrorKind is ErrInvalidConfig's (invalid); the error's text is what a user is shown.
func (e *ConfigError) ErrorKind() errs.Kind { return ErrInvalidConfig.ErrorKind() }

func configErr(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}
