package templates

import "github.com/idemops/idemops/errs"

// KeyRelated is what refers to a key from elsewhere: its replay requests and its
// reconciliation findings, both limited to Max rows (the findings list filtered by the key,
// FindingsHref, shows them all).
type KeyRelated struct {
	Replays      []ReplayRow
	Findings     []RelatedFinding
	FindingsHref string
	Max          int
}

// RelatedFinding is a finding of a key on the key page: its kind and state, the run that found
// it and the statement line it is about (Line 0: none).
type RelatedFinding struct {
	ID             int64
	Href           string
	Kind, KindHelp string
	State          string
	RunID          int64
	RunHref        string
	Line           int64
	LineHref       string
}

// EventLink is a link from a history event to what its detail names (a replay request, a
// finding); Href "" shows the label without a link (a page the operator may not open).
type EventLink struct {
	Label       errs.Phrase // "replay request #%d", said in the page's language
	Href, Class string
}
