package daemon

import (
	"errors"
	"fmt"
)

// Errors a caller may need to tell apart. The CLI and the console translate them into exit codes
// and HTTP statuses in one place each.
var (
	// ErrInvalidConfig: a Config (the daemon's or a job's) or schedule params out of range.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrInvalidSchedule: a cron spec or time zone that does not parse.
	ErrInvalidSchedule = errors.New("invalid schedule")
	// ErrUnknownSchedule: no schedule with that name.
	ErrUnknownSchedule = errors.New("no such schedule")
	// ErrUnknownJob: no job registered under that name.
	ErrUnknownJob = errors.New("no such job")
	// ErrUnknownRun: no job run with that id.
	ErrUnknownRun = errors.New("no such run")
	// ErrStopped: the run stopped between batches because the daemon is stopping or lost the
	// leadership; the batch in hand was finished. The run is recorded as abandoned.
	ErrStopped = errors.New("stopped before the pass was complete")
	// ErrPermanent marks a Sender error that no retry can fix (the relay fails the row at once).
	ErrPermanent = errors.New("permanent failure")
)

// configErr is a one-line error naming the field.
func configErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig)
}

// Permanent wraps err so that the outbox relay fails the row without retrying.
func Permanent(err error) error {
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}
