package templates

import (
	"context"
	"time"

	"github.com/idemops/idemops/errs"
)

// ReconJobRow is one recon job in the list.
type ReconJobRow struct {
	Name, Channel, Format, Source, Operations string
	// ChannelKind is the kind of its channel account ("" or generic: none).
	ChannelKind string
	// Fetcher is how its statements are fetched (wechatpay_v3, alipay, stripe, adyen, url,
	// file); Bill which of the account's bills, for a channel's fetcher.
	Fetcher, Bill      string
	CronSpec, TimeZone string
	Enabled            bool
	NextRun            *time.Time // nil: not scheduled
	Href               string
}

// ReconJobForm is the create/edit form's values and what was wrong with them.
type ReconJobForm struct {
	// Original is the name being edited ("" when creating).
	Original                                   string
	Name, Channel, Format, Source, Operations  string
	Bill                                       string
	CronSpec, TimeZone                         string
	BillDateOffsetDays, GraceSeconds, Deadline string
	Enabled                                    bool
	Error                                      string
	// The fee schedule (empty FeeRateBP: fees are not checked).
	FeeRateBP, FeeFixedMinor, FeeRounding, FeeDecimals, FeeRefunds string
}

// NextRunsView is the next run times of a cron spec, or why it is invalid.
type NextRunsView struct {
	Times []time.Time // in the spec's zone
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
	// Unavailable are the tenant cells that did not answer: their runs are left out.
	Unavailable []string
	Job         ReconJobRow
	Form        ReconJobForm
	NextRuns    NextRunsView
	Formats     []string
	CanEdit     bool
	CanRun      bool
	Notice      string
	Runs        []ReconRunRow
}

// KindCount is a number of findings of one kind.
type KindCount struct {
	Kind string
	N    int64
	Href string
}

// ReconRunRow is one recon run with its progress.
type ReconRunRow struct {
	ID   int64
	Href string
	// Cell is the tenant cell holding the run, when the list names it (a cell's own run, a part).
	Cell string
	// Parts are the cells' runs of this control cell's run: its statement matched in each.
	Parts                               []ReconRunRow
	Job, Channel, BillDate, Status      string
	ChannelKind                         string
	Actor                               string
	RowsParsed, RowsLoaded, RowsMatched int64
	Counts                              []KindCount
	AlreadyImported                     bool
	// KeysWithoutAccount: findings about keys that do not say which channel account they went
	// through (matched by tenant and the account's currencies, as before accounts were recorded).
	KeysWithoutAccount int64
	Error              string
	ErrorWhy           errs.Phrase // Error as a phrase, when the run kept one
	StartedAt          time.Time
	FinishedAt         *time.Time
	Live               bool
	// Statement is "#ID version V" of the statement the run matched (zero before the import).
	Statement errs.Phrase
}

// ReconRunsView is the runs list.
type ReconRunsView struct {
	// Unavailable are the tenant cells that did not answer: their runs are left out.
	Unavailable []string
	Rows        []ReconRunRow
	NextURL     string
}

// ReconRunView is one run's page; while it runs, its progress polls itself.
type ReconRunView struct {
	Run ReconRunRow
	// Parts are the cells' runs of a control cell's run: its statement matched in each cell,
	// where its findings are.
	Parts []ReconRunRow
	// Findings is the number of findings of the run, all kinds.
	Findings    int64
	FindingsURL string
	Error       string
}

// FindingRow is one finding.
type FindingRow struct {
	ID                               int64
	RunID                            int64
	Channel, BillDate, Kind, Subject string
	ChannelKind                      string
	KeyID                            int64
	KeyHref                          string
	Detail                           string
	// OrderNo is the merchant order number, Amount the finding's amount with its currency
	// ("1234.50 CNY", money.Display): what finance searches by.
	OrderNo, Amount string
	// Money is a SETTLEMENT_MISMATCH's or FEE_MISMATCH's amounts, each labelled (stated 45.00
	// USD, computed 45.64 USD, difference -0.64 USD); empty for other kinds.
	Money                      []FindingAmount
	State                      string
	Resolver, ReasonCode, Note string
	// ReasonLabel is the reason code's label in the vocabulary ("" for a code of none).
	ReasonLabel string
	CreatedAt   time.Time
	CanRecover  bool
	// Key names the finding's key (ID 0: the finding is about no key; Key "": not visible).
	Key KeyName
	// KindHelp says in words what the kind means (the label's title).
	KindHelp string
	// ChannelSide and LocalSide are what each side says: status or state, and amount.
	ChannelSide, LocalSide FindingSide
	// Line is the statement line the finding is about (0: none); LineHref its statement.
	Line     int64
	LineHref string
}

// FindingSide is what one side of a finding says: the channel's status or the key's state (a
// catalog word), its amount in minor units with the currency (nil: none stated; a currency
// without an amount is a currency alone).
type FindingSide struct {
	Status   string
	Amount   *int64
	Currency string
}

// FindingAmount is one labelled amount of a settlement or fee finding: Amount as money.Display
// writes it (with up to three more decimals where a fee has them).
type FindingAmount struct {
	Label, Amount string
}

// KindClass is the CSS class of a kind's coloured label (the label always carries its text).
func (f FindingRow) KindClass() string { return "kind-label kind-" + f.Kind }

// FindingSearch is the findings filter form's values.
type FindingSearch struct {
	// View is "grouped", "list" or "" (grouped unless a run or a key narrows it).
	View                                string
	Kind, State, Channel, BillDate, Run string
	// Key is a key id: only the findings of that key.
	Key string
	// OrderNo is a merchant order number (a prefix when it ends in *); Currency, AmountMin and
	// AmountMax an amount range in major units.
	OrderNo, Currency, AmountMin, AmountMax string
}

// StateTab is one state tab of the findings page: its count under the other filters.
type StateTab struct {
	State, Label string
	N            int64
	Href         string
	Current      bool
}

// FindingGroup is one group of the grouped findings page: a kind × channel × bill date, how many
// findings, and their amounts per currency.
type FindingGroup struct {
	ID                                string
	Kind, KindHelp, Channel, BillDate string
	// ChannelKind is the kind of its channel account ("" or generic: none).
	ChannelKind string
	N           int64
	// Amounts are the sums per currency, formatted with money ("1234.50 CNY").
	Amounts []string
	// Href is the group's list; RowsHref its first findings, for the group opened in place.
	Href, RowsHref string
}

// Reason is one reason of an action's vocabulary.
type Reason struct{ Code, Label string }

// FindingForm is an action form refused and shown again in place: the finding (0: the bulk
// form), the action, what was typed, the error said in the operator's language and the field it
// names.
type FindingForm struct {
	FindingID                int64
	Action, ReasonCode, Note string
	Error, Field             string
}

// For reports whether the form is the one of finding id and action.
func (f *FindingForm) For(id int64, action string) bool {
	return f != nil && f.FindingID == id && (action == "" || f.Action == action)
}

// FindingsView is the findings page.
type FindingsView struct {
	// Unavailable are the tenant cells that did not answer: their findings are left out.
	Unavailable []string
	Search      FindingSearch
	Tabs        []StateTab
	Kinds       []string
	// Grouped: the page shows Groups (GroupsMore: more than it lists); else Rows.
	Grouped    bool
	Groups     []FindingGroup
	GroupsMore bool
	Rows       []FindingRow
	// Matching is how many findings the filter matches (the current state's).
	Matching int64
	NextURL  string
	FirstURL string
	// ExportCSV and ExportXLSX download what the filter matches.
	ExportCSV, ExportXLSX string
	// BulkFields are the filter as hidden fields of the bulk form.
	BulkFields []Field
	CanAct     bool
	Notice     string
	Error      string
	// Form is a refused action form, shown again in place; Reasons the vocabulary per action.
	Form       *FindingForm
	Reasons    map[string][]Reason
	Currencies []string
}

// ReconLineView is one line of a run's statement.
type ReconLineView struct {
	RunID, StatementID                    int64
	RunHref, FindingsHref                 string
	Line                                  int
	ChannelTxnID, MerchantOrderNo, Status string
	Amount                                string
	OccurredAt                            time.Time
	Raw                                   string
	// Key is the key the line's merchant order number names, when the operator may see it.
	Key *KeyName
}

// lineFindings names the findings a statement line's page links to: its key's, else its run's.
func lineFindings(ctx context.Context, v ReconLineView) string {
	if v.Key != nil {
		return t(ctx, "findings of this key")
	}
	return t(ctx, "findings of this run")
}
