package daemon

import (
	"errors"
	"fmt"

	"github.com/idemops/idemops/errs"
)

// Errors a caller may need to tell apart, each with its kind (package errs), which the CLI and the
// console turn into an exit code or HTTP status by errs' one table.
var (
	// ErrInvalidConfig: a Config (the daemon's or a job's) or schedule params out of range.
	ErrInvalidConfig = errs.New(errs.Invalid, "invalid configuration")
	// ErrInvalidSchedule: a cron spec or time zone that does not parse.
	ErrInvalidSchedule = errs.New(errs.Invalid, "invalid schedule")
	// ErrUnknownSchedule: no schedule with that name.
	ErrUnknownSchedule = errs.New(errs.NotFound, "no such schedule")
	// ErrUnknownJob: no job registered under that name.
	ErrUnknownJob = errs.New(errs.NotFound, "no such job")
	// ErrUnknownRun: no job run with that id.
	ErrUnknownRun = errs.New(errs.NotFound, "no such run")
	// ErrStopped: the run stopped between batches because the daemon is stopping or lost the
	// leadership; the batch in hand was finished. The run is recorded as abandoned.
	ErrStopped = errs.New(errs.Unavailable, "stopped before the pass was complete")
	// ErrPermanent marks a Sender error that no retry can fix (the relay fails the row at once).
	ErrPermanent = errors.New("permanent failure") // a mark, no kind: the error it wraps keeps its own
)

// configErr is bad configuration naming the field (an *errs.FieldError of ErrInvalidConfig).
func configErr(field, format string, args ...any) error {
	return errs.Fieldf(field, format, args...).Of(ErrInvalidConfig)
}

// Permanent wraps err so that the outbox relay fails the row without retrying.
func Permanent(err error) error {
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}
