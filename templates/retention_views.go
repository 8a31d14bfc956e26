package templates

import (
	"time"

	"github.com/idemops/idemops/errs"
)

// FloorView is the retention floor and its three parts.
type FloorView struct {
	Total, ClientRetry, Backfill, ReconciliationLag time.Duration
	UpdatedBy                                       string
	UpdatedAt                                       time.Time
}

// PolicyRow is one retention policy.
type PolicyRow struct {
	Operation, State, UpdatedBy string
	KeepResponse, KeepKey       time.Duration
	UpdatedAt                   time.Time
}

// PolicyForm is the set-a-policy form's values and what was wrong with them.
type PolicyForm struct {
	Operation, State, KeepResponse, KeepKey string
	Error                                   string
	// Shorter, when set, names what a policy below the default periods will do; saving it then
	// needs the confirmation box ticked.
	Shorter errs.Phrase
}

// FloorForm is the floor form's values and what was wrong with them.
type FloorForm struct {
	ClientRetry, Backfill, ReconciliationLag string
	Error                                    string
}

// DueRow is one line of a dry run: keys of one operation and state created on one day that a
// purge would delete or tombstone.
type DueRow struct {
	Phase, Operation, State, Day string
	N                            int64
}

// PreviewView is a dry run's result.
type PreviewView struct {
	Done                bool
	Operation           string
	Deleted, Tombstoned int64
	Rows                []DueRow
	RunID               int64
	// Estimated: the counts were scaled up from a sample of SamplePercent of the keys table
	// (a table too big to read whole for a preview).
	Estimated     bool
	SamplePercent string
}

// PurgeRow is one purge_log row.
type PurgeRow struct {
	ID int64
	// Cell is the tenant cell whose daemon ran it ("" with one database).
	Cell                           string
	StartedAt                      time.Time
	FinishedAt                     *time.Time
	DryRun                         bool
	Actor, Operation, Status       string
	Deleted, Tombstoned, Restamped int64
	Timeouts, BatchSize            int
	Error                          string
}

// RetentionView is the retention page.
type RetentionView struct {
	// Unavailable are the tenant cells that did not answer: their counts and purges are left out.
	Unavailable []string
	Floor       FloorView
	Policies    []PolicyRow
	States      []string
	CanEdit     bool
	Notice      string
	Form        PolicyForm
	FloorForm   FloorForm
	Preview     PreviewView
	History     []PurgeRow
	HistoryNext string
}
