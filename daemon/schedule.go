package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/cronspec"
)

// timing is a parsed cron spec in its time zone; cronspec is the one parser, shared with the
// recon jobs.
type timing = cronspec.Schedule

// parseTiming validates a cron spec and an IANA time zone ("" means UTC): the standard five
// fields, an optional leading seconds field and the descriptors (@hourly, @every 10m).
func parseTiming(spec, timeZone string) (timing, error) {
	tm, err := cronspec.Parse(spec, timeZone)
	if err != nil {
		return timing{}, fmt.Errorf("%w: %w", err, ErrInvalidSchedule)
	}
	return tm, nil
}

func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// ValidateSchedule checks a cron spec and a time zone, with a one-line error naming the one that
// is wrong (ErrInvalidSchedule).
func ValidateSchedule(spec, timeZone string) error {
	_, err := parseTiming(spec, timeZone)
	return err
}

// NextRun is the first time after after at which spec fires in timeZone.
func NextRun(spec, timeZone string, after time.Time) (time.Time, error) {
	tm, err := parseTiming(spec, timeZone)
	if err != nil {
		return time.Time{}, err
	}
	return tm.Next(after), nil
}

// ScheduleSpec is what defines a schedule; SaveSchedule stores it.
type ScheduleSpec struct {
	// Name identifies the schedule (job_runs.schedule); a job's default schedule is named after
	// the job. 1–128 printable characters.
	Name string
	// Job is the Name of the job it runs.
	Job string
	// Params is passed to the job's RunOnce (a JSON object; empty means {}).
	Params json.RawMessage
	// Spec is a robfig/cron expression ("*/5 * * * *", "@every 1m"), evaluated in TimeZone
	// (IANA name; empty means UTC).
	Spec     string
	TimeZone string
	// Timeout bounds one run (0: DefaultTimeout; at most 24 h).
	Timeout time.Duration
}

// maxTimeout bounds a schedule's timeout.
const maxTimeout = 24 * time.Hour

func (s *ScheduleSpec) validate() (timing, error) {
	if err := validateName("name", s.Name); err != nil {
		return timing{}, err
	}
	if err := validateName("job", s.Job); err != nil {
		return timing{}, err
	}
	if len(s.Params) == 0 {
		s.Params = json.RawMessage("{}")
	}
	var obj map[string]any
	if len(s.Params) > 64<<10 || json.Unmarshal(s.Params, &obj) != nil || obj == nil {
		return timing{}, configErr("params", "must be a JSON object of at most 64 KiB")
	}
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Timeout < time.Millisecond || s.Timeout > maxTimeout {
		return timing{}, configErr("timeout", "%s is outside 1ms..%s", s.Timeout, maxTimeout)
	}
	s.Spec = strings.TrimSpace(s.Spec)
	return parseTiming(s.Spec, s.TimeZone)
}

func validateName(field, v string) error {
	if v == "" || len(v) > 128 {
		return configErr(field, "must be 1–128 characters")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= 0x20 || c > 0x7e {
			return configErr(field, "character %d is not printable ASCII", i+1)
		}
	}
	return nil
}

// scheduleModel is a row of schedules, the table gorm does the plain CRUD of; the leader's poll
// and its moves of next_run_at stay SQL (scheduler.go).
type scheduleModel struct {
	Name           string `gorm:"primaryKey"`
	Job            string
	Params         string `gorm:"type:jsonb"`
	Spec           string
	TimeZone       string
	TimeoutMs      int64
	NextRunAt      time.Time
	Paused         bool       `gorm:"<-:update"`
	RunRequestedAt *time.Time `gorm:"<-:update"`
	CreatedAt      time.Time  `gorm:"<-:false"`
	UpdatedAt      time.Time  `gorm:"<-:update;autoUpdateTime:false"`
}

func (scheduleModel) TableName() string { return "schedules" }

// model is the row s defines, next due at tm's next time after now.
func (s *ScheduleSpec) model(tm timing) *scheduleModel {
	return &scheduleModel{Name: s.Name, Job: s.Job, Params: string(s.Params), Spec: s.Spec, TimeZone: s.TimeZone,
		TimeoutMs: s.Timeout.Milliseconds(), NextRunAt: tm.Next(time.Now())}
}

// SaveSchedule creates the schedule or replaces its definition; its next run is computed afresh
// from now. Whether it is paused is kept. Errors: ErrInvalidSchedule, ErrInvalidConfig.
func SaveSchedule(ctx context.Context, db *gorm.DB, s ScheduleSpec) error {
	tm, err := s.validate()
	if err != nil {
		return err
	}
	replace := clause.AssignmentColumns([]string{"job", "params", "spec", "time_zone", "timeout_ms", "next_run_at"})
	replace = append(replace, clause.Assignment{Column: clause.Column{Name: "updated_at"}, Value: gorm.Expr("now()")})
	err = db.WithContext(ctx).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "name"}}, DoUpdates: replace}).
		Create(s.model(tm)).Error
	if err != nil {
		return fmt.Errorf("save schedule %s: %w", s.Name, err)
	}
	return nil
}

// ensureSchedule creates a job's default schedule unless one by that name exists (an operator's
// changes to it are kept across restarts).
func ensureSchedule(ctx context.Context, db *gorm.DB, s ScheduleSpec) error {
	tm, err := s.validate()
	if err != nil {
		return err
	}
	err = db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(s.model(tm)).Error
	if err != nil {
		return fmt.Errorf("create schedule %s: %w", s.Name, err)
	}
	return nil
}

// scheduleUpdate sets the named schedule's columns (and updated_at) and maps "no row" to
// ErrUnknownSchedule.
func scheduleUpdate(ctx context.Context, db *gorm.DB, what, name string, set map[string]any) error {
	set["updated_at"] = gorm.Expr("now()")
	res := db.WithContext(ctx).Model(&scheduleModel{}).Where("name = ?", name).Updates(set)
	if res.Error != nil {
		return fmt.Errorf("%s %s: %w", what, name, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("%s %s: %w", what, name, ErrUnknownSchedule)
	}
	return nil
}

// RunNow asks the leader to run the schedule at its next poll (even when paused), without
// moving its regular next run. ErrUnknownSchedule when there is none by that name.
func RunNow(ctx context.Context, db *gorm.DB, name string) error {
	return scheduleUpdate(ctx, db, "run now", name, map[string]any{"run_requested_at": gorm.Expr("COALESCE(run_requested_at, now())")})
}

// Pause stops the schedule's regular runs (RunNow still works). ErrUnknownSchedule.
func Pause(ctx context.Context, db *gorm.DB, name string) error {
	return scheduleUpdate(ctx, db, "pause", name, map[string]any{"paused": true})
}

// Resume restarts the schedule's regular runs. A slot missed while paused runs once, at once —
// the same rule as for downtime. ErrUnknownSchedule.
func Resume(ctx context.Context, db *gorm.DB, name string) error {
	return scheduleUpdate(ctx, db, "resume", name, map[string]any{"paused": false})
}

// DeleteSchedule removes a schedule; its past runs stay. ErrUnknownSchedule.
func DeleteSchedule(ctx context.Context, db *gorm.DB, name string) error {
	res := db.WithContext(ctx).Where("name = ?", name).Delete(&scheduleModel{})
	if res.Error != nil {
		return fmt.Errorf("delete schedule %s: %w", name, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("delete schedule %s: %w", name, ErrUnknownSchedule)
	}
	return nil
}

// Schedule is a schedule as the console and `idemops jobs list` show it.
type Schedule struct {
	Name           string
	Job            string
	Params         json.RawMessage
	Spec           string
	TimeZone       string
	Timeout        time.Duration
	NextRunAt      time.Time
	Paused         bool
	RunRequestedAt *time.Time
	// LastRun is the schedule's most recent run (nil: never ran). Its Stats are not loaded.
	LastRun *Run
}

type scheduleRow struct {
	Name           string
	Job            string
	Params         string
	Spec           string
	TimeZone       string
	TimeoutMs      int64
	NextRunAt      time.Time
	Paused         bool
	RunRequestedAt *time.Time
	LastID         *int64
	LastStatus     *string
	LastTrigger    *string
	LastReplica    *string
	LastStartedAt  *time.Time
	LastFinishedAt *time.Time
	LastError      *string
	LastPhrase     errs.NullPhrase
}

// maxSchedules bounds a listing; there are a handful of jobs and one schedule per
// reconciliation job.
const maxSchedules = 1000

// ListSchedules returns every schedule (at most 1000) by name, each with its last run
// (job_runs_schedule_idx serves the lateral lookup).
func ListSchedules(ctx context.Context, db *gorm.DB) ([]Schedule, error) {
	var rows []scheduleRow
	err := db.WithContext(ctx).Raw(`
SELECT s.name, s.job, s.params::text AS params, s.spec, s.time_zone, s.timeout_ms, s.next_run_at, s.paused,
       s.run_requested_at, r.id AS last_id, r.status AS last_status, r.trigger AS last_trigger,
       r.replica AS last_replica, r.started_at AS last_started_at, r.finished_at AS last_finished_at,
       r.error AS last_error, r.error_phrase::text AS last_phrase
FROM schedules s
LEFT JOIN LATERAL (
    SELECT id, status, trigger, replica, started_at, finished_at, error, error_phrase FROM job_runs
    WHERE schedule = s.name ORDER BY id DESC LIMIT 1
) r ON true
ORDER BY s.name
LIMIT ?`, maxSchedules).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		out[i] = Schedule{Name: r.Name, Job: r.Job, Params: json.RawMessage(r.Params), Spec: r.Spec, TimeZone: r.TimeZone,
			Timeout: time.Duration(r.TimeoutMs) * time.Millisecond, NextRunAt: r.NextRunAt, Paused: r.Paused,
			RunRequestedAt: r.RunRequestedAt}
		if r.LastID != nil {
			out[i].LastRun = &Run{ID: *r.LastID, Schedule: r.Name, Job: r.Job, Status: RunStatus(deref(r.LastStatus)),
				Trigger: deref(r.LastTrigger), Replica: deref(r.LastReplica), StartedAt: deref(r.LastStartedAt),
				FinishedAt: r.LastFinishedAt, Error: deref(r.LastError), ErrorPhrase: r.LastPhrase}
		}
	}
	return out, nil
}

// GetSchedule returns one schedule by name (ErrUnknownSchedule).
func GetSchedule(ctx context.Context, db *gorm.DB, name string) (*Schedule, error) {
	all, err := ListSchedules(ctx, db)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
	}
	return nil, fmt.Errorf("schedule %s: %w", name, ErrUnknownSchedule)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
