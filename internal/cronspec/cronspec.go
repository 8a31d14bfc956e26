// Package cronspec is the one reader of cron specs: the daemon's schedules and the recon jobs
// both parse theirs here, so a spec one accepts the other accepts too, and the next-runs preview
// the console shows is computed by the same schedule that will fire.
//
// A spec is robfig/cron's: the standard five fields with an optional leading seconds field, or a
// descriptor (@hourly, @every 10m). The time zone is an IANA name in a field of its own ("" is
// UTC): never a TZ= or CRON_TZ= prefix, never the host's "Local".
package cronspec

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // specs name IANA zones; do not depend on the host's zoneinfo

	"github.com/robfig/cron/v3"
)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Error is a refused spec or time zone: Field is "spec" or "time_zone", Value what was given,
// Reason one line saying why.
type Error struct {
	Field, Value, Reason string
}

func (e *Error) Error() string {
	name := "spec"
	if e.Field == FieldTimeZone {
		name = "time zone"
	}
	if e.Value == "" {
		return name + ": " + e.Reason
	}
	return fmt.Sprintf("%s %q: %s", name, e.Value, e.Reason)
}

// Detail is the error without the field's name: the value and the reason.
func (e *Error) Detail() string {
	if e.Value == "" {
		return e.Reason
	}
	return fmt.Sprintf("%q: %s", e.Value, e.Reason)
}

// The fields an Error names.
const (
	FieldSpec     = "spec"
	FieldTimeZone = "time_zone"
)

// Schedule is a parsed spec in its time zone.
type Schedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// Location is the schedule's time zone.
func (s Schedule) Location() *time.Location { return s.loc }

// Next is the first activation strictly after t (zero when it never fires again).
func (s Schedule) Next(t time.Time) time.Time { return s.sched.Next(t.In(s.loc)) }

// MaxPreview bounds NextN.
const MaxPreview = 100

// NextN is the next n activations after from (n at most MaxPreview), in the schedule's zone.
func (s Schedule) NextN(from time.Time, n int) []time.Time {
	n = min(max(n, 0), MaxPreview)
	out := make([]time.Time, 0, n)
	t := from
	for len(out) < n {
		if t = s.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// Parse validates a spec and a time zone ("" is UTC). A spec that never fires (30 February) is
// refused. Errors: *Error, one line.
func Parse(spec, timeZone string) (Schedule, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return Schedule{}, &Error{Field: FieldSpec, Reason: "must not be empty"}
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return Schedule{}, &Error{Field: FieldSpec, Value: spec, Reason: "set the time zone in its own field, not in the spec"}
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	if timeZone == "Local" {
		return Schedule{}, &Error{Field: FieldTimeZone, Value: timeZone, Reason: "name an IANA zone such as Asia/Shanghai"}
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil {
		return Schedule{}, &Error{Field: FieldTimeZone, Value: timeZone, Reason: "unknown"}
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return Schedule{}, &Error{Field: FieldSpec, Value: spec, Reason: oneLine(err.Error())}
	}
	s := Schedule{sched: sched, loc: loc}
	if s.Next(time.Now()).IsZero() {
		return Schedule{}, &Error{Field: FieldSpec, Value: spec, Reason: "never fires"}
	}
	return s, nil
}

// NextRuns is Parse then NextN: the preview of a spec being edited.
func NextRuns(spec, timeZone string, from time.Time, n int) ([]time.Time, error) {
	s, err := Parse(spec, timeZone)
	if err != nil {
		return nil, err
	}
	return s.NextN(from, n), nil
}

func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}
