package templates

import (
	"context"
	"time"

	"github.com/idemops/idemops/errs"

	"github.com/idemops/idemops/claim"
)

// ReplayPreviewData is what a replay of one key will do.
type ReplayPreviewData struct {
	Allowed       bool
	Outcome       string
	Text          errs.Phrase
	Action        string
	Amount        string
	NeedsApproval bool
	Token         string
}

// ReplayPreviewView is the page before a replay is confirmed.
type ReplayPreviewView struct {
	Key     *claim.Key
	Preview ReplayPreviewData
	// Error is a refusal at confirmation (the key changed, a guard said no).
	Error  string
	Reason string
	// CanMarkFinal offers the administrator's "mark final" with its own token.
	CanMarkFinal bool
	FinalToken   string
	// ReleaseToken confirms the administrator's "release for retry" (offered with mark final).
	ReleaseToken string
	Requests     []ReplayRow
}

// ReplayRow is one replay request as shown.
type ReplayRow struct {
	ID            int64
	Href          string
	KeyID         int64
	KeyHref       string
	Tenant        string
	DigestShort   string
	Requester     string
	Reason        string
	Action        errs.Phrase
	State         string
	NeedsApproval bool
	Approver      string
	OutcomeKind   string
	Outcome       errs.Phrase
	CreatedAt     time.Time
	CanApprove    bool
	BulkHref      string
	// Waiting, while the replay holds its key through the quarantine, says when it looks again.
	Waiting errs.Phrase
	// Name is the key as people know it (tenant · operation · key).
	Name KeyName
}

// ReplayView is one replay request's page.
type ReplayView struct {
	Req    ReplayRow
	Notice string
}

// ReplaysView lists replay requests: waiting for approval, then recent.
type ReplaysView struct {
	Pending []ReplayRow
	Recent  []ReplayRow
}

// BulkItemRow is one key of a bulk replay.
type BulkItemRow struct {
	Seq         int
	KeyID       int64
	KeyHref     string
	KeyState    string
	KeyVersion  int64
	Predicted   string
	Result      string // the result's label (resultLabels), said in the page's language
	Detail      errs.Phrase
	RequestHref string
	// Name is the key as people know it (tenant · operation · key).
	Name KeyName
	// Parked: downstream said not found once or could not answer; RecheckAt is when the bulk
	// job looks again (zero: its re-checks are used up, an operator replays it by hand), Checks
	// how often it has.
	Parked    bool
	RecheckAt time.Time
	Checks    int
}

// BulkView is a bulk replay: its preview, its progress, its per-key results.
type BulkView struct {
	ID           int64
	Href         string
	ProgressHref string
	StartHref    string
	FilterHref   string
	Filter       string
	State        string
	Operator     string
	Reason       string
	Total        int
	Processed    int
	Capped       bool
	Cap          int
	ByState      []Count
	ByOutcome    []Count
	Results      []Count
	Items        []BulkItemRow
	Error        string
	// NoneReplayable, when set, says why the run cannot start: every key is refused by a guard.
	NoneReplayable errs.Phrase
	// Preview is a selection not yet started (nothing stored): Plan and Token go back with the
	// start form; Selected says the keys were picked by hand rather than the whole filter.
	Preview  bool
	Selected bool
	Plan     string
	Token    string
	Expires  time.Time
	// RecheckAt is when a waiting run's next parked key is looked at again; Parked how many of
	// its keys are parked.
	RecheckAt time.Time
	Parked    int
	// With are the other runs of the same bulk replay (tenant cells: a run per cell), linked.
	With []RunLink
}

// RunLink links one run by its number.
type RunLink struct {
	ID   int64
	Href string
}

// runLength is how long r ran, or has been running (to the page's present).
func runLength(ctx context.Context, r RunRow) time.Duration {
	if r.FinishedAt.IsZero() {
		return nowOf(ctx).Sub(r.StartedAt)
	}
	return r.FinishedAt.Sub(r.StartedAt)
}

// Running says whether the page should keep polling for progress.
func (v BulkView) Running() bool { return v.State == "running" || v.State == "waiting" }

// LeaderRow is the daemon's leader lease.
type LeaderRow struct {
	ID        string
	Term      int64
	ElectedAt time.Time
	ExpiresAt time.Time
	Expired   bool
}

// CellDaemonRow is one cell's daemon: its leader, its replicas seen in the last hour, its
// schedules and how many of them last failed, and the runs running now. A cell that did not
// answer (Down) has its name alone.
type CellDaemonRow struct {
	Name        string
	Control     bool // the control cell (operators, audit, recon jobs)
	Down        bool
	HasLeader   bool
	Leader      LeaderRow
	Replicas    int
	ReplicaList []ReplicaRow
	Schedules   int
	Failed      int
	Running     int
}

// ReplicaRow is one daemon replica.
type ReplicaRow struct {
	ID, Name, Host string
	PID            int
	StartedAt      time.Time
	LastSeen       time.Time
	IsLeader       bool
}

// ScheduleRow is one scheduled job.
type ScheduleRow struct {
	// Cell is the tenant cell whose daemon runs it ("" with one database); DOM is what the
	// page's ids of its row say (the name, and across cells its cell: names repeat).
	Cell, DOM                         string
	Name, Job, Spec, TimeZone, Params string
	NextRunAt                         time.Time
	Paused                            bool
	Requested                         bool
	LastStatus                        string
	LastStarted                       time.Time
	LastError                         errs.Phrase
}

// RunRow is one job run.
type RunRow struct {
	ID   int64
	Href string
	// Cell is the tenant cell whose daemon ran it ("" with one database).
	Cell                            string
	Schedule, Job, Trigger, Replica string
	Term                            int64
	Status                          string
	StartedAt, DeadlineAt           time.Time
	FinishedAt, ProgressAt          time.Time // zero: not yet
	Phase                           string
	Done, Total                     int64
	Stats                           string
	Error                           errs.Phrase
}

// RunsView is the job runs table; Poll keeps it refreshing while a run is running or asked for.
// Job and Status are its filter (kept in the URL and in the polling URL).
type RunsView struct {
	// Unavailable are the tenant cells that did not answer: their runs are left out. The table
	// names them itself, since it replaces itself while it polls.
	Unavailable    []string
	Rows           []RunRow
	Poll           bool
	PollHref       string
	Job, Status    string
	Filtered       bool
	Jobs, Statuses []string
}

// JobsView is the daemon's page.
type JobsView struct {
	// Unavailable are the tenant cells that did not answer: their daemons and runs are left out.
	Unavailable []string
	// Cells is each tenant cell's daemon (one leader and its replicas per cell, a cell that did
	// not answer named), when tenants live in several: then Leader and Replicas are unused.
	Cells     []CellDaemonRow
	HasLeader bool
	Leader    LeaderRow
	Replicas  []ReplicaRow
	Schedules []ScheduleRow
	Runs      RunsView
	CanRun    bool // operators: run now
	CanPause  bool // admins: pause and resume
	Notice    string
	Error     string
}

// bulkMaxChecks is how often the bulk job looks again at one parked key (replay.bulkMaxChecks).
const bulkMaxChecks = 5
