package templates

import "time"

// FindingsBulkPreviewView is a bulk action's preview: what it would act on and the form that
// starts it (as typed, when Form is a refused start).
type FindingsBulkPreviewView struct {
	Count   int64
	Amounts []string
	ByKind  []KindCount
	Sample  []FindingRow
	UpTo    string // the newest finding the preview saw: an id, or one per cell ("a:12,b:1099511627790")
	// NeedsApproval: more than ApprovalAbove findings, a second operator approves the run.
	NeedsApproval bool
	ApprovalAbove int
	// TooMany: more than Cap; it cannot be started as it is.
	TooMany  bool
	Cap      int
	Selected bool
	// Fields carry the selection (filter, scope, ids) into the start form; FilterHref is the list.
	Fields     []Field
	FilterHref string
	Action     string
	Reasons    map[string][]Reason
	Form       *FindingForm
}

// FindingsBulkRunView is one bulk run of findings.
type FindingsBulkRunView struct {
	ID                               int64
	Href                             string
	Action, ReasonCode, ReasonLabel  string
	Note, Filter                     string
	Selected                         bool
	Operator, Approver, State, Error string
	Total, Processed                 int64
	Percent                          int
	Results                          []KindCount
	Amounts                          []string
	CreatedAt                        time.Time
	StartedAt, FinishedAt            *time.Time
	// Live: waiting for approval or running (the page polls itself).
	Live bool
	// CanDecide: the viewer may approve or reject it (waiting, an operator, not who started it).
	CanDecide bool
	Notice    string
}

// FindingsBulkRunsView lists bulk runs.
type FindingsBulkRunsView struct {
	Runs []FindingsBulkRunView
}
