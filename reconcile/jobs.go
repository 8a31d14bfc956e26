package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/cronspec"
)

// JobSpec is what an operator edits of a recon job.
type JobSpec struct {
	Name    string `json:"name"`
	Channel string `json:"channel"`
	Format  string `json:"format"`
	// Source is a generic account's file path pattern or http(s) URL template; {date} stands for
	// the bill date (YYYY-MM-DD) and {yyyymmdd} for it without dashes. Secrets in it (a token
	// in the query, a user and password) are kept apart: "***" stands for them once saved. The
	// job of an account of a channel kind has none: its fetcher knows the channel's API.
	Source string `json:"source"`
	// Bill is which of a channel account's bills the job reconciles: tradebill (default) or
	// fundflowbill for WeChat Pay, trade (default) or signcustomer for Alipay; empty otherwise.
	Bill string `json:"bill,omitempty"`
	// Operations are the operations whose keys the channel settles, e.g. payment.charge.
	Operations []string `json:"operations"`
	// BillDateOffsetDays: the bill date is today (in TimeZone) minus this many days.
	BillDateOffsetDays int    `json:"bill_date_offset_days"`
	CronSpec           string `json:"cron_spec"`
	TimeZone           string `json:"time_zone"`
	Enabled            bool   `json:"enabled"`
	// GraceSeconds: keys completed this close to the end of the bill date are not LOCAL_ONLY
	// (the channel may book them on the next day).
	GraceSeconds int `json:"grace_seconds"`
	// ReadyDeadlineSeconds: how long a run retries a statement that is not ready yet.
	ReadyDeadlineSeconds int `json:"ready_deadline_seconds"`
	// FeeSchedule, when set, is the channel's fee per line: a line whose fee differs is a
	// FEE_MISMATCH. Nil: fees are not checked.
	FeeSchedule *FeeSchedule `json:"fee_schedule,omitempty"`
}

// ReconJob is a stored recon job.
type ReconJob struct {
	ID int64 `json:"id"`
	JobSpec
	// Fetcher is the fetcher its statements come through (FetcherWechatPay, …, FetcherURL,
	// FetcherFile), by its channel account's kind.
	Fetcher   string    `json:"fetcher"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// sourceSecret is the sealed secrets of Source (source_secret).
	sourceSecret []byte
}

// Location is the job's time zone (validated when the job was stored).
func (j *ReconJob) Location() *time.Location {
	loc, err := time.LoadLocation(j.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// BillDate is the bill date a run starting at now reconciles: today in the job's zone minus the
// offset.
func (j *ReconJob) BillDate(now time.Time) string {
	return now.In(j.Location()).AddDate(0, 0, -j.BillDateOffsetDays).Format(time.DateOnly)
}

// MatchSettings are the job's rules for which local keys a statement covers.
func (j *ReconJob) MatchSettings() MatchSettings {
	return MatchSettings{Operations: j.Operations, Location: j.Location(), Grace: time.Duration(j.GraceSeconds) * time.Second,
		Fees: j.FeeSchedule}
}

var (
	namePattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	operationPattern = regexp.MustCompile(`^[^\s,|{}"]{1,128}$`)
)

// ParseCron validates a cron spec and a time zone with the daemon's rules (cronspec, the one
// parser): five fields with optional seconds, or a descriptor; an IANA zone in its own field.
// The error is one line naming the field (cron_spec or time_zone).
func ParseCron(spec, zone string) (cronspec.Schedule, error) {
	sched, err := cronspec.Parse(spec, zone)
	if err != nil {
		return cronspec.Schedule{}, cronError(err)
	}
	return sched, nil
}

// cronError names a cronspec refusal by the job's field.
func cronError(err error) error {
	var ce *cronspec.Error
	if !errors.As(err, &ce) {
		return err
	}
	field := "cron_spec"
	if ce.Field == cronspec.FieldTimeZone {
		field = "time_zone"
	}
	// The reason is a fixed sentence (looked up whole by a console that translates) or the
	// cron parser's own words.
	if ce.Value == "" {
		return invalidf(field, "%s", errs.Verbatim(ce.Reason))
	}
	return invalidf(field, "%q: %s", ce.Value, errs.Verbatim(ce.Reason))
}

// NextRuns returns the next n run times of a cron spec in zone after from (n at most 100).
func NextRuns(spec, zone string, from time.Time, n int) ([]time.Time, error) {
	sched, err := ParseCron(spec, zone)
	if err != nil {
		return nil, err
	}
	return sched.NextN(from, n), nil
}

// Validate checks every field of a job; the error names the first wrong one.
func (s *JobSpec) Validate() error {
	s.Name, s.Channel, s.Format, s.Source = strings.TrimSpace(s.Name), strings.TrimSpace(s.Channel),
		strings.TrimSpace(s.Format), strings.TrimSpace(s.Source)
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	switch {
	case !namePattern.MatchString(s.Name):
		return invalidf("name", "%q: 1-64 letters, digits, '.', '_' or '-'", s.Name)
	case !namePattern.MatchString(s.Channel):
		return invalidf("channel", "%q: 1-64 letters, digits, '.', '_' or '-'", s.Channel)
	case s.Format == FormatProfile:
		return invalidf("format", "the profile format is not available for scheduled jobs yet; import such statements with the CLI")
	}
	if _, ok := registry[s.Format]; !ok {
		return invalidf("format", "unknown format %q (known: %s)", s.Format, strings.Join(Formats(), ", "))
	}
	if s.Source != "" {
		if err := validateSource(s.Source); err != nil {
			return err
		}
	}
	if s.Bill = strings.TrimSpace(s.Bill); len(s.Bill) > 32 {
		return invalidf("bill", "%q is not a bill", truncateName(s.Bill))
	}
	if len(s.Operations) == 0 {
		return invalidf("operations", "name at least one operation whose keys the channel settles (e.g. payment.charge)")
	}
	for _, op := range s.Operations {
		if !operationPattern.MatchString(op) {
			return invalidf("operations", "%q is not an operation name", op)
		}
	}
	switch {
	case s.BillDateOffsetDays < 0 || s.BillDateOffsetDays > 31:
		return invalidf("bill_date_offset_days", "%d is outside 0..31", s.BillDateOffsetDays)
	case s.GraceSeconds < 0 || s.GraceSeconds > 86400:
		return invalidf("grace_seconds", "%d is outside 0..86400", s.GraceSeconds)
	case s.ReadyDeadlineSeconds < 0 || s.ReadyDeadlineSeconds > 86400:
		return invalidf("ready_deadline_seconds", "%d is outside 0..86400", s.ReadyDeadlineSeconds)
	}
	if s.FeeSchedule != nil {
		if err := s.FeeSchedule.Validate(); err != nil {
			return err
		}
	}
	_, err := ParseCron(s.CronSpec, s.TimeZone)
	return err
}

func validateSource(src string) error {
	if src == "" {
		return invalidf("source", "must not be empty")
	}
	if !strings.Contains(src, "{date}") && !strings.Contains(src, "{yyyymmdd}") {
		return invalidf("source", "%q has no {date} (or {yyyymmdd}) placeholder", RedactSource(src))
	}
	if len(src) > 2048 {
		return invalidf("source", "longer than 2048 characters")
	}
	if isHTTPSource(src) {
		u, err := url.Parse(strings.NewReplacer("{date}", "2006-01-02", "{yyyymmdd}", "20060102").Replace(src))
		if err != nil || u.Host == "" {
			return invalidf("source", "%q is not a valid URL template", RedactSource(src))
		}
	}
	return nil
}

func isHTTPSource(src string) bool {
	return strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://")
}

// job is the stored job a row holds.
func (r *reconJobModel) job() ReconJob {
	j := ReconJob{ID: r.ID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Fetcher: FetcherName(r.AccountKind, r.Source),
		sourceSecret: r.SourceSecret, JobSpec: JobSpec{
			Name: r.Name, Channel: r.Channel, Format: r.Format, Source: r.Source, Bill: r.Bill, BillDateOffsetDays: r.BillDateOffsetDays,
			CronSpec: r.CronSpec, TimeZone: r.TimeZone, Enabled: r.Enabled, GraceSeconds: r.GraceSeconds,
			ReadyDeadlineSeconds: r.ReadyDeadlineSeconds}}
	if len(r.Operations) > 0 {
		j.Operations = r.Operations
	}
	if r.FeeSchedule != nil {
		var f FeeSchedule
		if json.Unmarshal([]byte(*r.FeeSchedule), &f) == nil {
			j.FeeSchedule = &f
		}
	}
	return j
}

// CreateJob validates and stores a new recon job. Errors: ErrInvalid (naming the field, also
// for a name already taken, a source the policy refuses, a bill or source the account's kind
// does not take).
func (r *Reconciler) CreateJob(ctx context.Context, spec JobSpec) (*ReconJob, error) {
	return r.saveJob(ctx, "", spec)
}

// UpdateJob replaces the job named name with spec (which may rename it). A secret of the source
// written "***" keeps the one saved before. Errors: ErrNotFound, ErrInvalid.
func (r *Reconciler) UpdateJob(ctx context.Context, name string, spec JobSpec) (*ReconJob, error) {
	return r.saveJob(ctx, name, spec)
}

// saveJob creates (original "") or updates a job, its source's secrets sealed apart.
func (r *Reconciler) saveJob(ctx context.Context, original string, spec JobSpec) (*ReconJob, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	public, found, refs := splitSource(spec.Source)
	var row *reconJobModel
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := r.checkJobFetch(ctx, tx, &spec); err != nil {
			return err
		}
		m := reconJobModel{Name: spec.Name, Channel: spec.Channel, Format: spec.Format, Source: public, Bill: spec.Bill,
			Operations: spec.Operations, BillDateOffsetDays: spec.BillDateOffsetDays, CronSpec: spec.CronSpec,
			TimeZone: spec.TimeZone, Enabled: spec.Enabled, GraceSeconds: spec.GraceSeconds,
			ReadyDeadlineSeconds: spec.ReadyDeadlineSeconds, FeeSchedule: storedFeeSchedule(spec.FeeSchedule)}
		var previous sourceSecrets
		var id int64
		if original != "" {
			old, err := findJob(tx.Clauses(clause.Locking{Strength: "UPDATE"}), original)
			if err != nil {
				return err
			}
			oldJob := old.job()
			if previous, err = r.openSourceSecrets(&oldJob); err != nil && len(refs) > 0 {
				return err
			}
			id = old.ID
			if err := tx.Model(&reconJobModel{ID: id}).Updates(m.edited()).Error; err != nil {
				return err
			}
		} else {
			if err := tx.Create(&m).Error; err != nil {
				return err
			}
			id = m.ID
		}
		sealed, err := r.sealSourceSecrets(id, found, refs, previous)
		if err != nil {
			return err
		}
		if err := tx.Model(&reconJobModel{ID: id}).Update("source_secret", sealed).Error; err != nil {
			return err
		}
		if row, err = findJob(tx, spec.Name); err != nil {
			return err
		}
		return syncSchedule(ctx, tx, original, row.job())
	})
	if isUniqueViolation(err) {
		return nil, errs.Errorf("%w: %w", ErrInvalid, errs.Fieldf("name", "a recon job named %q exists", spec.Name).Of(ErrNameTaken))
	}
	var fe *errs.FieldError
	if errors.As(err, &fe) || errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("save recon job %s: %w", spec.Name, err)
	}
	j := row.job()
	return &j, nil
}

// findJob reads the job named name with its account's kind. Errors: ErrNotFound.
func findJob(db *gorm.DB, name string) (*reconJobModel, error) {
	var rows []reconJobModel
	if err := db.Select(jobSelect).Where("name = ?", name).Limit(1).Find(&rows).Error; err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("recon job %q: %w", name, ErrNotFound)
	}
	return &rows[0], nil
}

// jobBills are the bills each kind's fetcher gets, the default first, with the format that
// reads each ("" where no statement format reads it yet: the fetcher gets it, a job cannot
// reconcile it).
var jobBills = map[string][][2]string{
	KindWechatPay: {{"tradebill", "wechat"}, {"fundflowbill", ""}},
	KindAlipay:    {{"trade", "alipay"}, {"signcustomer", ""}},
	KindStripe:    {{"", "stripe"}},
	KindAdyen:     {{"", "adyen"}},
}

// checkJobFetch checks what the job fetches against its channel account's kind: a generic
// account's job names a source the policy allows; a channel kind's names no source, one of the
// kind's bills, and the format that reads it. The default bill is filled in.
func (r *Reconciler) checkJobFetch(ctx context.Context, tx *gorm.DB, spec *JobSpec) error {
	kind, err := accountKind(ctx, tx, spec.Channel)
	if errors.Is(err, ErrNotFound) {
		kind, err = KindGeneric, nil
	}
	if err != nil {
		return err
	}
	bills, channelKind := jobBills[kind]
	if !channelKind {
		if spec.Source == "" {
			return invalidf("source", "must not be empty")
		}
		if spec.Bill != "" {
			return invalidf("bill", "a generic account's job fetches its source; it has no bill")
		}
		return r.sources.checkSource(spec.Source)
	}
	if spec.Source != "" {
		return invalidf("source", "a %s account's job fetches from the channel's API: leave the source empty", kind)
	}
	if spec.Bill == "" {
		spec.Bill = bills[0][0]
	}
	var names []string
	for _, b := range bills {
		if b[0] == "" {
			continue
		}
		names = append(names, b[0])
		if b[0] != spec.Bill {
			continue
		}
		if b[1] == "" {
			return invalidf("bill", "no statement format reads the %s bill yet", spec.Bill)
		}
		if spec.Format != b[1] {
			return invalidf("format", "the %s bill is read by the %s format", spec.Bill, b[1])
		}
		return nil
	}
	if len(names) == 0 {
		if spec.Bill != "" {
			return invalidf("bill", "a %s account's job has no bill to choose", kind)
		}
		if spec.Format != bills[0][1] {
			return invalidf("format", "a %s account's statements are read by the %s format", kind, bills[0][1])
		}
		return nil
	}
	return invalidf("bill", "%q is not a %s bill (%s)", truncateName(spec.Bill), kind, strings.Join(names, ", "))
}

// SetJobEnabled enables or disables a job. Errors: ErrNotFound.
func (r *Reconciler) SetJobEnabled(ctx context.Context, name string, enabled bool) error {
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&reconJobModel{}).Where("name = ?", name).
			Updates(map[string]any{"enabled": enabled, "updated_at": gorm.Expr("now()")})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("recon job %q: %w", name, ErrNotFound)
		}
		row, err := findJob(tx, name)
		if err != nil {
			return err
		}
		return syncSchedule(ctx, tx, name, row.job())
	})
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("enable recon job %s: %w", name, err)
	}
	return nil
}

// ScheduleName is the daemon schedule that runs a recon job.
func ScheduleName(job string) string { return JobName + ":" + job }

// syncSchedule mirrors a recon job into the daemon's schedules, in the transaction that changed
// the job, so the daemon runs exactly what recon_jobs says: its cron spec in its time zone, paused
// while the job is disabled, with a timeout that covers waiting for a late statement.
func syncSchedule(ctx context.Context, tx *gorm.DB, oldName string, j ReconJob) error {
	if oldName != "" && oldName != j.Name {
		if err := daemon.DeleteSchedule(ctx, tx, ScheduleName(oldName)); err != nil && !errors.Is(err, daemon.ErrUnknownSchedule) {
			return err
		}
	}
	params, _ := json.Marshal(JobParams{Job: j.Name})
	timeout := time.Duration(j.ReadyDeadlineSeconds)*time.Second + 10*time.Minute
	timeout = min(timeout, 24*time.Hour)
	if err := daemon.SaveSchedule(ctx, tx, daemon.ScheduleSpec{Name: ScheduleName(j.Name), Job: JobName, Params: params,
		Spec: j.CronSpec, TimeZone: j.TimeZone, Timeout: timeout}); err != nil {
		return err
	}
	if j.Enabled {
		return daemon.Resume(ctx, tx, ScheduleName(j.Name))
	}
	return daemon.Pause(ctx, tx, ScheduleName(j.Name))
}

// GetJob reads a job by name. Errors: ErrNotFound.
func (r *Reconciler) GetJob(ctx context.Context, name string) (*ReconJob, error) {
	row, err := findJob(r.db.WithContext(ctx), name)
	if errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("recon job %s: %w", name, err)
	}
	j := row.job()
	return &j, nil
}

// ListJobs returns every recon job by name (a deployment has a handful, one per channel feed).
func (r *Reconciler) ListJobs(ctx context.Context) ([]ReconJob, error) {
	var rows []reconJobModel
	if err := r.db.WithContext(ctx).Select(jobSelect).Order("name").Limit(1000).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list recon jobs: %w", err)
	}
	out := make([]ReconJob, len(rows))
	for i := range rows {
		out[i] = rows[i].job()
	}
	return out, nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
