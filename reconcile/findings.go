package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// FindingState is where a finding stands.
type FindingState string

const (
	FindingOpen     FindingState = "open"
	FindingResolved FindingState = "resolved"
	FindingIgnored  FindingState = "ignored"
)

// Finding is one discrepancy between a statement and the local records.
type Finding struct {
	ID         int64  `json:"id"`
	RunID      int64  `json:"run_id"` // the run that last found it
	FirstRunID int64  `json:"first_run_id"`
	Channel    string `json:"channel"`
	BillDate   string `json:"bill_date"`
	Kind       Kind   `json:"kind"`
	// Subject is what the finding is about: key:ID, txn:CHANNEL_TXN_ID, order:NO or file:SHA256.
	Subject         string          `json:"subject"`
	StatementID     *int64          `json:"statement_id,omitempty"`
	KeyID           *int64          `json:"key_id,omitempty"`
	StatementLineID *int64          `json:"statement_line_id,omitempty"`
	Detail          json.RawMessage `json:"detail"`
	State           FindingState    `json:"state"`
	Resolver        *string         `json:"resolver,omitempty"`
	ReasonCode      *string         `json:"reason_code,omitempty"`
	Note            *string         `json:"note,omitempty"`
	ResolvedAt      *time.Time      `json:"resolved_at,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
}

type findingRow struct {
	ID              int64
	RunID           int64
	FirstRunID      int64
	Channel         string
	BillDate        string
	Kind            string
	Subject         string
	StatementID     *int64
	KeyID           *int64
	StatementLineID *int64
	Detail          string
	State           string
	Resolver        *string
	ReasonCode      *string
	Note            *string
	ResolvedAt      *time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

func (f findingRow) finding() Finding {
	return Finding{ID: f.ID, RunID: f.RunID, FirstRunID: f.FirstRunID, Channel: f.Channel, BillDate: f.BillDate,
		Kind: Kind(f.Kind), Subject: f.Subject, StatementID: f.StatementID, KeyID: f.KeyID, StatementLineID: f.StatementLineID,
		Detail: json.RawMessage(f.Detail), State: FindingState(f.State), Resolver: f.Resolver, ReasonCode: f.ReasonCode,
		Note: f.Note, ResolvedAt: f.ResolvedAt, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
}

const findingColumns = `id, run_id, first_run_id, channel, to_char(bill_date, 'YYYY-MM-DD') AS bill_date, kind, subject,
	statement_id, key_id, statement_line_id, detail::text AS detail, state, resolver, reason_code, note, resolved_at,
	created_at, updated_at FROM discrepancies`

// FindingFilter selects findings, newest first. Zero fields do not filter.
type FindingFilter struct {
	RunID    int64
	Kind     Kind
	State    FindingState
	Channel  string
	BillDate string // YYYY-MM-DD
	KeyID    int64
	// BeforeID continues a listing after its last row (keyset paging).
	BeforeID int64
	Limit    int // default 100, at most 1000
}

// ListFindings lists findings matching f, newest first. Errors: ErrInvalid (a filter value).
func (r *Reconciler) ListFindings(ctx context.Context, f FindingFilter) ([]Finding, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 1000)
	where, args, err := findingWhere(f)
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + findingColumns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, f.Limit)
	var rows []findingRow
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	out := make([]Finding, len(rows))
	for i, row := range rows {
		out[i] = row.finding()
	}
	return out, nil
}

// FindingGroup is a number of findings sharing a state and what decides who may see them: the
// tenant of their key (KeyTenant nil with HasKey: the key is gone) or, without a key, their
// channel account.
type FindingGroup struct {
	State     FindingState
	HasKey    bool
	KeyTenant *string
	Channel   string
	N         int64
}

// FindingGroups counts the findings matching f (its State, BeforeID and Limit aside) per state,
// key tenant and channel, so a caller can count per state only what an operator may see. The
// groups are bounded by states × tenants × channels. Errors: ErrInvalid (a filter value).
func (r *Reconciler) FindingGroups(ctx context.Context, f FindingFilter) ([]FindingGroup, error) {
	f.State, f.BeforeID = "", 0
	where, args, err := findingWhere(f)
	if err != nil {
		return nil, err
	}
	q := `SELECT d.state, d.key_id IS NOT NULL AS has_key, k.tenant AS key_tenant, d.channel, count(*) AS n
FROM discrepancies d LEFT JOIN idempotency_keys k ON k.id = d.key_id`
	if len(where) > 0 {
		q += ` WHERE d.` + strings.Join(where, " AND d.")
	}
	q += ` GROUP BY 1, 2, 3, 4`
	var rows []FindingGroup
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count findings: %w", err)
	}
	return rows, nil
}

// findingWhere is f's conditions on discrepancies (unqualified column names first in each).
func findingWhere(f FindingFilter) ([]string, []any, error) {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if f.RunID != 0 {
		add("run_id = ?", f.RunID)
	}
	if f.Kind != "" {
		if !validKind(f.Kind) {
			return nil, nil, invalidf("kind", "%q is not a kind of finding", f.Kind)
		}
		add("kind = ?", string(f.Kind))
	}
	if f.State != "" {
		if f.State != FindingOpen && f.State != FindingResolved && f.State != FindingIgnored {
			return nil, nil, invalidf("state", "%q is not open, resolved or ignored", f.State)
		}
		add("state = ?", string(f.State))
	}
	if f.Channel != "" {
		add("channel = ?", f.Channel)
	}
	if f.BillDate != "" {
		if _, err := time.Parse(time.DateOnly, f.BillDate); err != nil {
			return nil, nil, invalidf("bill_date", "%q is not YYYY-MM-DD", f.BillDate)
		}
		add("bill_date = ?::date", f.BillDate)
	}
	if f.KeyID != 0 {
		add("key_id = ?", f.KeyID)
	}
	if f.BeforeID != 0 {
		add("id < ?", f.BeforeID)
	}
	return where, args, nil
}

func validKind(k Kind) bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

// GetFinding reads one finding. Errors: ErrNotFound.
func (r *Reconciler) GetFinding(ctx context.Context, id int64) (*Finding, error) {
	return getFinding(ctx, r.db, id, false)
}

func getFinding(ctx context.Context, db *gorm.DB, id int64, lock bool) (*Finding, error) {
	q := `SELECT ` + findingColumns + ` WHERE id = ?`
	if lock {
		q += ` FOR UPDATE`
	}
	var rows []findingRow
	if err := db.WithContext(ctx).Raw(q, id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("finding %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("finding %d: %w", id, ErrNotFound)
	}
	f := rows[0].finding()
	return &f, nil
}

var reasonCodePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// maxNote bounds an operator's note.
const maxNote = 2000

// operatorPattern is the console's operator name rule (letters, digits, '.', '_', '@', '-').
var operatorPattern = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

func checkOperator(operator string) error {
	if !operatorPattern.MatchString(operator) {
		return invalidf("operator", "%q is not an operator name", operator)
	}
	return nil
}

// Resolve closes an open finding as resolved with a reason code (e.g. refunded_at_channel,
// booked_next_day) and a note; audited as reconcile.finding.resolve by operator:NAME.
// Errors: ErrNotFound, ErrClosed, ErrInvalid.
func (r *Reconciler) Resolve(ctx context.Context, findingID int64, operator, reasonCode, note string) (*Finding, error) {
	if !reasonCodePattern.MatchString(reasonCode) {
		return nil, invalidf("reason_code", "%q: 1-64 lower-case letters, digits, '_', '.' or '-'", reasonCode)
	}
	return r.closeFinding(ctx, findingID, operator, FindingResolved, reasonCode, note, "reconcile.finding.resolve", nil)
}

// Ignore closes an open finding as ignored, with the reason as its note; audited as
// reconcile.finding.ignore. Errors: ErrNotFound, ErrClosed, ErrInvalid.
func (r *Reconciler) Ignore(ctx context.Context, findingID int64, operator, reason string) (*Finding, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, invalidf("reason", "say why the finding is ignored")
	}
	return r.closeFinding(ctx, findingID, operator, FindingIgnored, "ignored", reason, "reconcile.finding.ignore", nil)
}

// closeFinding moves an open finding to state and writes the audit record in the same transaction:
// when the audit cannot be written, the finding stays open.
func (r *Reconciler) closeFinding(ctx context.Context, findingID int64, operator string, state FindingState, reasonCode, note,
	action string, extra map[string]any) (*Finding, error) {
	if err := checkOperator(operator); err != nil {
		return nil, err
	}
	if len(note) > maxNote {
		return nil, invalidf("note", "%d characters, at most %d", len(note), maxNote)
	}
	if r.cfg.Auditor == nil {
		return nil, errors.New("reconcile: no Auditor configured; resolutions must be audited")
	}
	actor := "operator:" + operator
	var out *Finding
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		f, err := getFinding(ctx, tx, findingID, true)
		if err != nil {
			return err
		}
		if f.State != FindingOpen {
			return errs.Errorf("finding %d is %s: %w", findingID, f.State, ErrClosed)
		}
		if err := tx.Exec(`UPDATE discrepancies SET state = ?, resolver = ?, reason_code = ?, note = ?, resolved_at = now(),
			updated_at = now() WHERE id = ?`, string(state), actor, reasonCode, note, findingID).Error; err != nil {
			return fmt.Errorf("close finding %d: %w", findingID, err)
		}
		detail := map[string]any{"kind": string(f.Kind), "channel": f.Channel, "bill_date": f.BillDate,
			"state": string(state), "reason_code": reasonCode, "note": note}
		if f.KeyID != nil {
			detail["key_id"] = *f.KeyID
		}
		for k, v := range extra {
			detail[k] = v
		}
		if err := r.cfg.Auditor.Record(ctx, actor, action, fmt.Sprintf("finding:%d", findingID), detail); err != nil {
			return fmt.Errorf("audit %s of finding %d: %w", action, findingID, err)
		}
		if out, err = getFinding(ctx, tx, findingID, false); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Recoverable answers "may this finding be recovered" from the finding alone: it is open, of
// kind CHANNEL_ONLY or STATUS_MISMATCH, the channel's status on the line is success, and it has
// a local key. nil when it may; otherwise an error wrapping ErrClosed or ErrCannotRecover that
// says why. Recover asks it before reading the key (whose state it checks next); the console
// asks it to decide whether to offer the Recover button, so the two cannot disagree.
func (f *Finding) Recoverable() error {
	if f.State != FindingOpen {
		return errs.Errorf("finding %d is %s: %w", f.ID, f.State, ErrClosed)
	}
	var d struct {
		ChannelStatus string `json:"channel_status"`
	}
	_ = json.Unmarshal(f.Detail, &d)
	switch {
	case f.Kind != ChannelOnly && f.Kind != StatusMismatch:
		return errs.Errorf("%w: finding %d is %s; recover applies to CHANNEL_ONLY and STATUS_MISMATCH", ErrCannotRecover, f.ID, f.Kind)
	case d.ChannelStatus != string(StatusSuccess):
		return errs.Errorf("%w: finding %d: the channel did not succeed (%s); there is nothing to recover", ErrCannotRecover, f.ID, d.ChannelStatus)
	case f.KeyID == nil:
		return errs.Errorf("%w: finding %d has no local key; resolve it with a reason instead", ErrCannotRecover, f.ID)
	}
	return nil
}

// statementHold is the failure Recover holds a key with when the channel's lookup does not find
// the charge its statement shows: the outcome is unknown until an operator decides (release for
// retry, mark final, or resolve the finding after asking the channel). A client retry of the key
// is answered 500 outcome-unknown meanwhile, never executed.
func statementHold(f *Finding) *claim.Failure {
	return claim.HeldFailure("statement_not_found",
		fmt.Sprintf("the channel's statement shows this charge (finding %d) but its lookup does not find it; held for an operator", f.ID),
		claim.OutcomeUnknownAnswer("the outcome of this request is unknown and is being resolved by an operator; do not retry it as a new request"))
}

// Recovery is what Recover did.
type Recovery struct {
	Finding *Finding      `json:"finding"`
	Outcome claim.Kind    `json:"outcome"` // claim's verdict: recovered, failed, in_progress
	State   claim.State   `json:"state"`   // the key's state afterwards
	Retry   time.Duration `json:"retry_after,omitempty"`
}

// Recover applies the channel's document to the finding's key through the claim logic — the
// same path as a daemon takeover: Takeover as operator:NAME, then Drive without executing, which
// always looks the document up downstream first and, when found, applies and completes the key
// (event recovered_from_downstream); when the lookup does not find what the statement shows, the
// key is held for an operator (statement_not_found) and nothing is executed, on a redrive
// operation too. It is for CHANNEL_ONLY and STATUS_MISMATCH findings where the
// channel succeeded and the key is failed_retryable or processing with an expired lease. When
// the lookup recovers the key the finding is resolved (reason code recovered); otherwise it stays
// open and the error says what the claim logic answered. Audited as reconcile.finding.recover
// either way. Errors: ErrNotFound, ErrClosed, ErrInvalid, ErrCannotRecover.
func (r *Reconciler) Recover(ctx context.Context, findingID int64, operator, note string) (*Recovery, error) {
	if err := checkOperator(operator); err != nil {
		return nil, err
	}
	if r.cfg.Store == nil || r.cfg.Operations == nil || r.cfg.Auditor == nil {
		return nil, fmt.Errorf("%w: the reconciler has no claim store, operations registry or auditor", ErrCannotRecover)
	}
	f, err := r.GetFinding(ctx, findingID)
	if err != nil {
		return nil, err
	}
	if err := f.Recoverable(); err != nil {
		return nil, err
	}
	key, err := r.cfg.Store.Get(ctx, *f.KeyID)
	if errors.Is(err, claim.ErrNotFound) {
		return nil, errs.Errorf("%w: key %d no longer exists", ErrCannotRecover, *f.KeyID)
	}
	if err != nil {
		return nil, err
	}
	if !key.Replayable() {
		why := string(key.State)
		if key.State == claim.StateProcessing {
			why = "processing with a live lease (another attempt is working on it)"
		}
		return nil, fmt.Errorf("%w: key %d is %s; only failed_retryable keys and processing keys with an expired lease can be recovered",
			ErrCannotRecover, key.ID, why)
	}
	op, ok := r.cfg.Operations.Get(key.Operation)
	if !ok {
		return nil, errs.Errorf("%w: no operation %q is registered to look the document up", ErrCannotRecover, key.Operation)
	}
	actor := "operator:" + operator
	lease, err := r.cfg.Store.Takeover(ctx, key.ID, actor)
	if errors.Is(err, claim.ErrNotReplayable) || errors.Is(err, claim.ErrLeaseLost) {
		return nil, errs.Errorf("%w: %v", ErrCannotRecover, err)
	}
	if err != nil {
		return nil, fmt.Errorf("recover finding %d: %w", findingID, err)
	}
	// The finding rests on the channel's statement: Recover never executes (on a redrive
	// operation either), and a lookup that misses what the statement shows holds the key for an
	// operator rather than leaving it to a retry that would charge again.
	out, err := r.cfg.Store.Drive(ctx, op, lease, claim.DriveOptions{Execute: false, HoldIfNotFound: statementHold(f)})
	if err != nil {
		return nil, fmt.Errorf("recover finding %d: %w", findingID, err)
	}
	rec := &Recovery{Outcome: out.Kind, State: out.State, Retry: out.RetryAfter}
	audit := map[string]any{"key_id": key.ID, "outcome": string(out.Kind), "key_state": string(out.State)}
	if out.Kind != claim.Recovered {
		// The claim logic decided otherwise (downstream said not found, or failed, or could not
		// answer); the attempt is audited and the finding stays open.
		if aerr := r.cfg.Auditor.Record(ctx, actor, "reconcile.finding.recover", fmt.Sprintf("finding:%d", findingID), audit); aerr != nil {
			return nil, fmt.Errorf("audit recover of finding %d: %w", findingID, aerr)
		}
		rec.Finding = f
		why := string(out.Kind)
		if out.Failure != nil {
			why += ": " + out.Failure.Code
		}
		return rec, errs.Errorf("%w: the channel's document was not applied (%s); key %d is %s", ErrCannotRecover, why, key.ID, out.State)
	}
	rec.Finding, err = r.closeFinding(ctx, findingID, operator, FindingResolved, "recovered", note, "reconcile.finding.recover", audit)
	if err != nil {
		return nil, err
	}
	return rec, nil
}
