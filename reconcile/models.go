package reconcile

import (
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/gorm"
)

// The admin tables this package owns, as gorm models: gorm does their plain CRUD (create, read,
// update by key, upsert). Statements, lines, runs and findings, the matcher and the listings
// that join several tables stay SQL (docs/ARCHITECTURE.md, "Storage"). Columns with a database
// default are not written on insert (<-:update, or <-:false when never); gorm drops a column it
// may not write from an update without a word, so every column an update sets must allow it.
// An upsert names the columns it inserts (Select): the others keep their defaults.

// channelAccountModel is a row of channel_accounts.
type channelAccountModel struct {
	Channel   string `gorm:"primaryKey"`
	Tenants   textList
	Kind      string
	Settings  string    `gorm:"type:jsonb"`
	UpdatedAt time.Time `gorm:"<-:update;autoUpdateTime:false"`
	UpdatedBy string
}

func (channelAccountModel) TableName() string { return "channel_accounts" }

// reconJobModel is a row of recon_jobs, with its channel account's kind (read only: a
// subquery, jobSelect).
type reconJobModel struct {
	ID                   int64 `gorm:"primaryKey"`
	Name                 string
	Channel              string
	Format               string
	Source               string
	Bill                 string
	SourceSecret         []byte `gorm:"<-:update"`
	Operations           textList
	BillDateOffsetDays   int
	CronSpec             string
	TimeZone             string
	Enabled              bool
	GraceSeconds         int
	ReadyDeadlineSeconds int
	FeeSchedule          *string   `gorm:"type:jsonb"`
	CreatedAt            time.Time `gorm:"<-:false"`
	UpdatedAt            time.Time `gorm:"<-:update;autoUpdateTime:false"`
	AccountKind          string    `gorm:"->;-:migration"`
}

func (reconJobModel) TableName() string { return "recon_jobs" }

// edited is what an operator's edit of a job sets: every column of its spec, zero values (a
// disabled job, no fee schedule) included, and updated_at.
func (m *reconJobModel) edited() map[string]any {
	return map[string]any{"name": m.Name, "channel": m.Channel, "format": m.Format, "source": m.Source, "bill": m.Bill,
		"operations": m.Operations, "bill_date_offset_days": m.BillDateOffsetDays, "cron_spec": m.CronSpec,
		"time_zone": m.TimeZone, "enabled": m.Enabled, "grace_seconds": m.GraceSeconds,
		"ready_deadline_seconds": m.ReadyDeadlineSeconds, "fee_schedule": m.FeeSchedule, "updated_at": gorm.Expr("now()")}
}

// jobSelect reads a recon job with its channel account's kind ("generic" without an account).
const jobSelect = `recon_jobs.*,
	coalesce((SELECT a.kind FROM channel_accounts a WHERE a.channel = recon_jobs.channel), 'generic') AS account_kind`

// textList is a text[] column.
type textList []string

// Value writes the list as a PostgreSQL array literal.
func (l textList) Value() (driver.Value, error) { return textArray(l), nil }

// Scan reads a text[] the driver hands over as its text form.
func (l *textList) Scan(src any) error {
	return pgtype.NewMap().SQLScanner((*[]string)(l)).Scan(src)
}

// storedFeeSchedule is the fee_schedule column's value for f (nil: none).
func storedFeeSchedule(f *FeeSchedule) *string {
	if f == nil {
		return nil
	}
	s := feeScheduleJSON(f).(string)
	return &s
}
