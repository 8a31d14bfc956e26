package templates

import "time"

// ReconJobRow is one recon job in the list.
type ReconJobRow struct {
	Name, Channel, Format, Source, Operations string
	CronSpec, TimeZone                        string
	Enabled                                   bool
	NextRun                                   string
	Href                                      string
}

// ReconJobForm is the create/edit form's values and what was wrong with them.
type ReconJobForm struct {
	// Original is the name being edited ("" when creating).
	Original                                   string
	Name, Channel, Format, Source, Operations  string
	CronSpec, TimeZone                         string
	BillDateOffsetDays, GraceSeconds, Deadline string
	Enabled                                    bool
	Error                                      string
}

// NextRunsView is the next run times of a cron spec, or why it is invalid.
type NextRunsView struct {
	Times []string
	Error string
}

// UploadForm is the statement upload form.
type UploadForm struct {
	Channel, Format, BillDate string
	Error                     string
}

// ReconView is the reconciliation page: jobs, the create form, the statement upload.
type ReconView struct {
	Jobs      []ReconJobRow
	Formats   []string
	CanEdit   bool // administrators: create, edit, enable
	CanRun    bool // operators: run now, upload
	Notice    string
	Form      ReconJobForm
	NextRuns  NextRunsView
	Upload    UploadForm
	UploadMax string
	Channels  ChannelAccountsView
}

// ReconJobView is one job's page (its edit form for administrators).
type ReconJobView struct {
	Job      ReconJobRow
	Form     ReconJobForm
	NextRuns NextRunsView
	Formats  []string
	CanEdit  bool
	CanRun   bool
	Notice   string
	Runs     []ReconRunRow
}

// KindCount is a number of findings of one kind.
type KindCount struct {
	Kind string
	N    int64
	Href string
}

// ReconRunRow is one recon run with its progress.
type ReconRunRow struct {
	ID                                  int64
	Href                                string
	Job, Channel, BillDate, Status      string
	Actor                               string
	RowsParsed, RowsLoaded, RowsMatched int64
	Counts                              []KindCount
	AlreadyImported                     bool
	Error                               string
	StartedAt                           time.Time
	FinishedAt                          *time.Time
	Live                                bool
}

// ReconRunsView is the runs list.
type ReconRunsView struct {
	Rows    []ReconRunRow
	NextURL string
}

// ReconRunView is one run's page; while it runs, its progress polls itself.
type ReconRunView struct {
	Run         ReconRunRow
	FindingsURL string
	Error       string
}

// FindingRow is one finding.
type FindingRow struct {
	ID                               int64
	RunID                            int64
	Channel, BillDate, Kind, Subject string
	KeyID                            int64
	KeyHref                          string
	Detail                           string
	State                            string
	Resolver, ReasonCode, Note       string
	CreatedAt                        time.Time
	CanRecover                       bool
}

// FindingSearch is the findings filter form's values.
type FindingSearch struct {
	Kind, State, Channel, BillDate, Run string
}

// FindingsView is the findings page.
type FindingsView struct {
	Search   FindingSearch
	Kinds    []string
	Rows     []FindingRow
	NextURL  string
	FirstURL string
	CanAct   bool
	Notice   string
	Error    string
}
