// Package templates holds the console's pages as templ components. Components are functions of
// the plain view types below; the console fills them and renders with the request's context.
// Only the console imports this package. Generated *_templ.go files are committed; regenerate
// with `go tool templ generate`.
package templates

import (
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// Chrome is what every signed-in page shows around its content.
type Chrome struct {
	User       string
	Role       string
	CSRF       string
	Active     string // nav entry: dashboard, keys, audit, operators
	IsAdmin    bool
	IsOperator bool   // operator or admin
	TimeZone   string // IANA zone the operator sees times in
	// Here is the page's own address (path and query): the language and zone switches come
	// back to it.
	Here string
}

// LoginView is the sign-in form.
type LoginView struct {
	Name  string
	CSRF  string
	Next  string
	Error string
	// SSO shows the "Sign in with SSO" button; PasswordOff hides the password form.
	SSO         bool
	PasswordOff bool
}

// ErrorView is a readable error page.
type ErrorView struct {
	Status  int
	Title   string
	Message string
}

// Count is one labelled figure. Capped is a count that stopped at N: there are more than N
// (shown "N+").
type Count struct {
	Label  string
	N      int64
	Href   string
	Capped bool
}

// StateCount is keys of one operation in one state.
type StateCount struct {
	Operation string
	State     string
	N         int64
	Href      string
}

// Bar is one bar of a server-rendered chart, in SVG user units.
type Bar struct {
	X, Y, W, H string
	Minute     time.Time // the minute it counts
	N          int64     // its claims
}

// Chart is a bar chart with its axis labels.
type Chart struct {
	Bars       []Bar
	Max        int64
	Total      int64
	Start, End time.Time // the first minute and now (the axis' ends)
}

// Field is one name=value pair.
type Field struct{ Name, Value string }

// DashboardView is the dashboard's figures.
type DashboardView struct {
	Window        string
	ByState       []StateCount
	Open          []Count
	ExpiredLeases Count
	// Attention is "need attention": the sum of AttentionItems, each what needs an operator of
	// one kind (a card each when not zero).
	Attention      Count
	AttentionItems []Count
	// Unresolved counts the keys whose outcome outside is unknown: retention keeps them until an
	// operator (or a retry that asks downstream) resolves them.
	Unresolved    Count
	Claims        Chart
	DaemonRunning bool
	DaemonNote    string
	// Daemon is the jobs page's model: the dashboard shows it as cards.
	Daemon JobsView
	// Unavailable are the tenant cells that did not answer: their figures are left out.
	Unavailable []string
}

// KeyRow is one key in a search result.
type KeyRow struct {
	ID             int64
	Href           string
	Tenant         string
	Operation      string
	Key            string
	DigestShort    string
	State          string
	Attempts       int
	CreatedAt      time.Time
	NeedsAttention bool
	// AmountMinor and Currency are the key's declared amount (nil / "": none declared).
	AmountMinor *int64
	Currency    string
}

// KeyFindView answers the header's find box when the key matched none or several keys.
type KeyFindView struct {
	Key       string
	Rows      []KeyRow
	Limit     int
	Truncated bool
}

// KeySearch is the search form's current values.
type KeySearch struct {
	Tenant, Operation, State, From, To, Digest, Field, Value string
	Attention, Unresolved                                    bool
}

// KeysView is the key search page.
type KeysView struct {
	// Unavailable are the tenant cells that did not answer: their keys are left out.
	Unavailable []string
	Search      KeySearch
	States      []string
	Rows        []KeyRow
	NextURL     string
	FirstURL    string
	IsFirst     bool
	Error       string
	// BulkFields are the search's filters for the bulk-replay form.
	BulkFields []Field
	// Matching is how many keys the search matches, counted up to BulkCap; MatchingMore says
	// more than BulkCap match (a bulk replay takes the newest BulkCap).
	Matching     int
	MatchingMore bool
	BulkCap      int
}

// Body is a request or response body: redacted unless revealed.
type Body struct {
	Name     string // "request" or "response"
	Present  bool
	Size     int
	Revealed bool
	Text     string
}

// CheckView is the answer of a downstream check.
type CheckView struct {
	Done    bool
	Found   bool
	Summary errs.Phrase // what downstream has; recorded in English, shown in the page's language
	Error   errs.Phrase // why downstream could not answer
}

// KeyView is the key detail page.
type KeyView struct {
	Key       *claim.Key
	Events    []claim.Event
	Request   Body
	Response  Body
	CanReveal bool
	CanCheck  bool
	Check     CheckView
	Headers   string
	// CanReplay shows the replay section (operators); Refusal is why the key may not be replayed.
	CanReplay bool
	Refusal   errs.Phrase
	// CanHold shows the legal-hold form (administrators).
	CanHold bool
	// Panels are the deployment's extra sections (Config.KeyPanels).
	Panels []KeyPanel
	// Summary is the intent's non-sensitive fields its operation declares (IntentSpec.Summary),
	// shown without reveal; empty when the operation declares none.
	Summary []SummaryRow
	// Answers are the answers the client got from the stored record (replays, 409, 422).
	Answers []AnswerRow
	// Related are the key's replay requests and findings; EventLinks the links of history
	// events whose detail names one, by event id.
	Related    KeyRelated
	EventLinks map[int64][]EventLink
	// Cell is the tenant cell holding the key ("" with one database).
	Cell string
}

// SummaryRow is one field of a key's intent summary, formatted (an amount with its currency):
// Label is the field in words ("merchant order no"), shown translated when the catalog has
// it, else the field's path as code.
type SummaryRow struct {
	Label, Field, Value string
}

// AnswerRow is one kind of answer a key's client got without an execution, aggregated.
type AnswerRow struct {
	Kind        string // replay, in_progress, mismatch
	Status      int
	Count       int64
	First, Last time.Time
}

// AuditSearch is the audit filter form's values.
type AuditSearch struct {
	Actor, Action, Tenant, Target, From, To string
}

// AuditView is the audit page.
type AuditView struct {
	Search   AuditSearch
	Rows     []AuditRow
	NextURL  string
	FirstURL string
	IsFirst  bool
	Error    string
}

// AuditRow is one audit entry as shown.
type AuditRow struct {
	Seq                                   int64
	At                                    time.Time
	Actor, Action, Target, Tenant, Detail string
	IP                                    string
	Hash                                  string
	// Key names the target's key when the target is key:ID (ID 0 otherwise).
	Key KeyName
}

// OperatorRow is one operator on the admin page.
type OperatorRow struct {
	ID        int64
	Name      string
	Role      string
	Tenants   string
	Disabled  bool
	LastLogin *time.Time // nil: never
}

// OperatorsView is the admin page.
type OperatorsView struct {
	Operators []OperatorRow
	Roles     []string
	Notice    string
	NewToken  string
	Error     string
}
