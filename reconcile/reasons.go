package reconcile

import (
	"strings"

	"github.com/idemops/idemops/errs"
)

// Why a finding is closed, recovered or reopened is a reason from a fixed vocabulary (which a
// console translates, and a report can count) plus a free note. The codes are stable: they are
// stored on the finding (reason_code) and in the audit log. ReasonOther needs a note.

// Reason is one reason an operator may give: its code and its label (English; the console's
// catalog translates it).
type Reason struct {
	Code  string `json:"code"`
	Label string `json:"label"`
}

// Finding actions that take a reason.
const (
	ActionResolve = "resolve"
	ActionIgnore  = "ignore"
	ActionRecover = "recover"
	ActionReopen  = "reopen"
)

// ReasonOther is the reason that says "see the note": it needs one.
const ReasonOther = "other"

// closeReasons are why a finding is resolved or ignored.
var closeReasons = []Reason{
	{"refunded_at_channel", "Refunded at the channel"},
	{"booked_other_day", "Booked on another day's statement"},
	{"corrected_at_channel", "Corrected by the channel"},
	{"corrected_locally", "Corrected in our records"},
	{"timing_difference", "Timing difference, settles later"},
	{"test_transaction", "Test transaction"},
	{"below_threshold", "Below the reconciliation threshold"},
	{"known_channel_issue", "Known channel issue"},
	{ReasonOther, "Other (say why in the note)"},
}

// reasons are the reasons each action takes.
var reasons = map[string][]Reason{
	ActionResolve: closeReasons,
	ActionIgnore:  closeReasons,
	ActionRecover: {
		{"service_crashed", "The service stopped after the channel charged"},
		{"answer_lost", "The channel's answer was lost"},
		{ReasonOther, "Other (say why in the note)"},
	},
	ActionReopen: {
		{"closed_in_error", "Closed in error"},
		{"channel_reversed", "The channel reversed its correction"},
		{ReasonOther, "Other (say why in the note)"},
	},
}

// Reasons is the vocabulary of action (resolve, ignore, recover, reopen), in the order a form
// lists it; nil for an action that takes none.
func Reasons(action string) []Reason { return reasons[action] }

// reasonLabels names every code a finding may carry: the vocabulary, and the codes the system
// itself writes (a run that no longer finds it, a recovery, an ignore from before the
// vocabulary).
var reasonLabels = func() map[string]string {
	m := map[string]string{"not_found_again": "Not found again by a later run", "recovered": "Recovered from the channel",
		"ignored": "Ignored"}
	for _, rs := range reasons {
		for _, r := range rs {
			m[r.Code] = r.Label
		}
	}
	return m
}()

// ReasonLabel is the label of a stored reason code (English), or "" for a code of no vocabulary
// (one written before there was one: shown as it is).
func ReasonLabel(code string) string { return reasonLabels[code] }

// CheckReason validates an operator's reason for action: a code of its vocabulary and a note
// of at most maxNote bytes, which ReasonOther requires. Errors: ErrInvalid naming reason_code or
// note.
func CheckReason(action, code, note string) (string, string, error) {
	code, note = strings.TrimSpace(code), strings.TrimSpace(note)
	vocab := reasons[action]
	if code == "" {
		return "", "", invalidf("reason_code", "choose a reason")
	}
	found := false
	for _, r := range vocab {
		found = found || r.Code == code
	}
	if !found {
		codes := make([]string, len(vocab))
		for i, r := range vocab {
			codes[i] = r.Code
		}
		return "", "", invalidWhy("reason_code", errs.Phrasef("%q is not one of the reasons (%s)", truncateName(code),
			errs.Verbatim(strings.Join(codes, ", "))))
	}
	if len(note) > maxNote {
		return "", "", invalidf("note", "%d characters, at most %d", len(note), maxNote)
	}
	if code == ReasonOther && note == "" {
		return "", "", invalidf("note", "say why: the reason is \"other\"")
	}
	return code, note, nil
}
