package replay

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
)

// Prediction is what a replay of a key will do, as its preview sees it.
type Prediction string

const (
	// PredictRefused: the key may not be replayed (the preview says why).
	PredictRefused Prediction = "refused"
	// PredictRecorded: downstream has the document; it is recorded and nothing is sent.
	PredictRecorded Prediction = "recorded"
	// PredictRecordedFailed: downstream has the document and it failed; the key fails with it.
	PredictRecordedFailed Prediction = "recorded_failed"
	// PredictSend: downstream said not found a quarantine ago and says so again: it executes.
	PredictSend Prediction = "send"
	// PredictNotFoundOnce: the first not-found parks the key; it executes only after a second
	// not-found a quarantine later.
	PredictNotFoundOnce Prediction = "not_found_once"
	// PredictLookupError: downstream cannot answer; the replay would park the key with a backoff.
	PredictLookupError Prediction = "lookup_error"
)

// sends says whether a replay predicted so may execute: only a preview that showed a send (now,
// or after the quarantine's second look) lets its replay execute.
func (p Prediction) sends() bool { return p == PredictSend || p == PredictNotFoundOnce }

// Predictions are every prediction a preview makes.
var Predictions = []Prediction{PredictRefused, PredictRecorded, PredictRecordedFailed, PredictSend,
	PredictNotFoundOnce, PredictLookupError}

// Preview is what the preview page and the API show before a confirmation.
type Preview struct {
	KeyID   int64       `json:"key_id"`
	Version int64       `json:"version"`
	State   claim.State `json:"state"`
	Allowed bool        `json:"allowed"`
	Outcome Prediction  `json:"outcome"`
	Text    string      `json:"text"`
	// Why is Text as a phrase, for a console that shows it in the operator's language.
	Why errs.Phrase `json:"-"`
	// Action says what executing would send ("a charge of 12.34 CNY to alice").
	Action        string `json:"action"`
	Amount        string `json:"amount,omitempty"`
	NeedsApproval bool   `json:"needs_approval"`
	// Token confirms this preview: bound to the key, its version and the operator.
	Token string `json:"token,omitempty"`
}

// Preview is the single-key preview for a (k read within a's scope) with its confirmation
// token. It runs the Operation's Lookup read-only and writes nothing.
func (w *Workflow) Preview(ctx context.Context, a Actor, k *claim.Key) Preview {
	p := Preview{KeyID: k.ID, Version: k.Version, State: k.State, Action: actionOf(k)}
	if k.AmountMinor != nil && k.Currency != nil {
		p.Amount = money.Display(*k.AmountMinor, *k.Currency)
	}
	p.Outcome, p.Why = w.predict(ctx, a, k)
	p.Text = p.Why.String()
	if p.Outcome == PredictRefused {
		return p
	}
	p.Allowed, p.NeedsApproval = true, w.needsApproval(k)
	p.Token = w.replayToken(a.ID, k.ID, k.Version, p.Outcome)
	return p
}

// predict runs the Operation's Lookup read-only and says what a replay of k will do.
func (w *Workflow) predict(ctx context.Context, a Actor, k *claim.Key) (Prediction, errs.Phrase) {
	if r := k.ReplayRefusalPhrase(); r.Format != "" {
		return PredictRefused, r
	}
	o, err := w.operation(k.Operation)
	if err != nil {
		return PredictRefused, errs.Verbatim(err.Error())
	}
	lctx, cancel := context.WithTimeout(ctx, w.cfg.LookupTimeout)
	defer cancel()
	doc, err := claim.LookupSafely(lctx, o, k.LookupLease(a.Ref()))
	// The claim's rule (claim.Judge) decides, as it will when the replay runs.
	switch v := w.claims.Judge(doc != nil, err, k.NotFoundAt); {
	case v == claim.AskLater:
		return PredictLookupError, errs.Phrasef("downstream could not answer (%s) — a replay now only records that and parks the key for a backoff; nothing is sent",
			truncate(err.Error(), 200))
	case v == claim.Found && doc.Failure != nil:
		return PredictRecordedFailed, errs.Phrasef("the channel already has this %s and it failed (%s) — it will be recorded as failed, nothing is sent",
			errs.Verbatim(nounOf(k)), doc.Failure.Code)
	case v == claim.Found:
		return PredictRecorded, errs.Phrasef("the channel already has this %s (%s) — it will be recorded, nothing is sent",
			errs.Verbatim(nounOf(k)), doc.ResourceID)
	case v == claim.Absent:
		return PredictSend, errs.Phrasef("not found — %s will be sent now (downstream also said not found at %s, a quarantine ago)",
			actionPhrase(k), *k.NotFoundAt)
	default:
		return PredictNotFoundOnce, errs.Phrasef("not found — %s will be sent after a second check, one quarantine (%s) later: this replay records the first not-found and parks the key until then",
			actionPhrase(k), w.claims.Config().Quarantine)
	}
}

// actionOf says in words what executing k sends: "a charge of 12.34 CNY to alice".
func actionOf(k *claim.Key) string { return actionPhrase(k).String() }

// actionPhrase is actionOf as a phrase, for a console that says it in the operator's language
// (one format per shape, so a translation can order noun, amount and payee its own way).
func actionPhrase(k *claim.Key) errs.Phrase {
	name := k.Operation
	if i := strings.LastIndexByte(name, '.'); i >= 0 && i < len(name)-1 {
		name = name[i+1:]
	}
	an := strings.ContainsRune("aeiou", rune(name[0]))
	// A noun, looked up in the console's catalog when shown ("charge" is 扣款).
	noun := errs.Verbatim(name)
	amount, payee := "", ""
	if k.AmountMinor != nil && k.Currency != nil {
		amount = money.Display(*k.AmountMinor, *k.Currency)
	}
	var intent struct {
		Payee any `json:"payee"`
	}
	if json.Unmarshal(k.Request, &intent) == nil {
		if p, ok := intent.Payee.(string); ok && p != "" {
			payee = truncate(p, 64)
		}
	}
	switch {
	case amount != "" && payee != "" && an:
		return errs.Phrasef("an %s of %s to %s", noun, amount, payee)
	case amount != "" && payee != "":
		return errs.Phrasef("a %s of %s to %s", noun, amount, payee)
	case amount != "" && an:
		return errs.Phrasef("an %s of %s", noun, amount)
	case amount != "":
		return errs.Phrasef("a %s of %s", noun, amount)
	case payee != "" && an:
		return errs.Phrasef("an %s to %s", noun, payee)
	case payee != "":
		return errs.Phrasef("a %s to %s", noun, payee)
	case an:
		return errs.Phrasef("an %s", noun)
	}
	return errs.Phrasef("a %s", noun)
}

func nounOf(k *claim.Key) string {
	if i := strings.LastIndexByte(k.Operation, '.'); i >= 0 && i < len(k.Operation)-1 {
		return k.Operation[i+1:]
	}
	return "document"
}

// needsApproval is the four-eyes rule: a key whose amount is above ApprovalAbove minor units.
func (w *Workflow) needsApproval(k *claim.Key) bool {
	return w.cfg.ApprovalAbove >= 0 && k.AmountMinor != nil && *k.AmountMinor > w.cfg.ApprovalAbove
}

// Waiting says what an executing replay of keyID is doing: waiting out the quarantine (with the
// time it looks again and a countdown) or running.
func (w *Workflow) Waiting(ctx context.Context, keyID int64) errs.Phrase {
	k, err := w.claims.Get(ctx, keyID)
	if err != nil || k.NotFoundAt == nil {
		return errs.Phrasef("The replay is running.")
	}
	at := w.claims.QuarantineEnds(*k.NotFoundAt)
	left := max(time.Until(at).Round(time.Second), 0)
	return errs.Phrasef("Downstream said not found at %s. This replay holds the key and looks again at %s (in %s), "+
		"then sends or records what it finds; no second confirmation is needed.", *k.NotFoundAt, at, left)
}
