package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
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
	// MerchantOrderNo, AmountMinor and Currency are what finance searches by, from the detail:
	// the order number the channel knows the payment by, and the amount the finding is about
	// (the channel's line, else the key's, else the second charge or the settled difference;
	// migration 00106). Nil when the finding has none (a rejected file).
	MerchantOrderNo *string `json:"merchant_order_no,omitempty"`
	AmountMinor     *int64  `json:"amount_minor,omitempty"`
	Currency        *string `json:"currency,omitempty"`
	// Tenant is whose finding it is: its key's tenant, recorded when it was found ("*" for a
	// finding whose key was gone before tenants were recorded); nil for a finding about the
	// statement itself, which is its channel account's.
	Tenant     *string      `json:"tenant,omitempty"`
	State      FindingState `json:"state"`
	Resolver   *string      `json:"resolver,omitempty"`
	ReasonCode *string      `json:"reason_code,omitempty"`
	Note       *string      `json:"note,omitempty"`
	ResolvedAt *time.Time   `json:"resolved_at,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
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
	MerchantOrderNo *string
	AmountMinor     *int64
	Currency        *string
	Tenant          *string
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
		Detail: json.RawMessage(f.Detail), MerchantOrderNo: f.MerchantOrderNo, AmountMinor: f.AmountMinor, Currency: f.Currency,
		Tenant: f.Tenant, State: FindingState(f.State), Resolver: f.Resolver, ReasonCode: f.ReasonCode,
		Note: f.Note, ResolvedAt: f.ResolvedAt, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
}

const findingColumns = `d.id, d.run_id, d.first_run_id, d.channel, to_char(d.bill_date, 'YYYY-MM-DD') AS bill_date, d.kind, d.subject,
	d.statement_id, d.key_id, d.statement_line_id, d.detail::text AS detail, d.merchant_order_no, d.amount_minor, d.currency, d.tenant,
	d.state, d.resolver, d.reason_code, d.note, d.resolved_at, d.created_at, d.updated_at FROM discrepancies d`

// FindingFilter selects findings, newest first. Zero fields do not filter.
type FindingFilter struct {
	RunID int64
	// RunParts makes RunID also keep the findings of the runs that are a cell's part of it: in a
	// deployment of cells a control cell's run finds nothing itself, its parts do.
	RunParts bool
	Kind     Kind
	State    FindingState
	Channel  string
	BillDate string // YYYY-MM-DD
	KeyID    int64
	// OrderNo is a merchant order number: exactly, or by prefix when it ends in '*'.
	OrderNo string
	// Currency, with AmountMin and AmountMax (minor units, inclusive, either may be nil), keeps
	// the findings about an amount of that currency in the range.
	Currency             string
	AmountMin, AmountMax *int64
	// UpTo keeps the findings with an id up to it (what a bulk preview saw; 0: all).
	UpTo int64
	// IDs keeps only these findings (picked by hand; nil: no such filter).
	IDs []int64
	// Visible keeps the findings an operator may see; nil: every finding.
	Visible *Visibility
	// BeforeID continues a listing after its last row (keyset paging).
	BeforeID int64
	// billFrom keeps the groups of a bill date from it on (GroupFindings' window).
	billFrom string
	Limit    int // default 100, at most MaxFindingsListed
}

// Visibility is what an operator may see of the findings, as the console's scope decision
// (access.Decide) worked it out: findings about keys of Tenants, and findings about a
// statement itself (no tenant) of Channels.
type Visibility struct {
	Tenants  []string
	Channels []string
}

// maxOrderNo bounds a merchant order number in a filter.
const maxOrderNo = 128

// Simple reports whether f filters only by what discrepancy_groups keeps (state, kind,
// channel, bill date, and who may see them): its counts can be read from there.
func (f FindingFilter) Simple() bool {
	return f.RunID == 0 && f.KeyID == 0 && f.OrderNo == "" && f.Currency == "" && f.AmountMin == nil && f.AmountMax == nil &&
		f.UpTo == 0 && f.IDs == nil
}

// MaxFindingsListed bounds a page of ListFindings.
const MaxFindingsListed = 1000

// ListFindings lists findings matching f, newest first. Errors: ErrInvalid (a filter value).
func (r *Reconciler) ListFindings(ctx context.Context, f FindingFilter) ([]Finding, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, MaxFindingsListed)
	where, args, err := findingWhere(f)
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + findingColumns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	// discrepancies_open_idx (id DESC, open), discrepancies_group_idx (a group's findings) or
	// the order number's and amount's indexes, by the filter.
	q += ` ORDER BY d.id DESC LIMIT ?`
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

// EachFinding calls fn for each finding matching f (its BeforeID and Limit aside), newest
// first, streaming: at most max of them (the caller counts first; see CountMatching). It stops
// at fn's first error.
func (r *Reconciler) EachFinding(ctx context.Context, f FindingFilter, max int, fn func(*Finding) error) error {
	f.BeforeID = 0
	where, args, err := findingWhere(f)
	if err != nil {
		return err
	}
	q := `SELECT ` + findingColumns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY d.id DESC LIMIT ?`
	rows, err := r.db.WithContext(ctx).Raw(q, append(args, max)...).Rows()
	if err != nil {
		return fmt.Errorf("read findings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var row findingRow
		if err := r.db.ScanRows(rows, &row); err != nil {
			return fmt.Errorf("read findings: %w", err)
		}
		fd := row.finding()
		if err := fn(&fd); err != nil {
			return err
		}
	}
	return rows.Err()
}

// CountMatching counts the findings matching f (its BeforeID and Limit aside), up to upTo+1
// (so a caller can tell "more than upTo" from "exactly upTo" without counting a million).
func (r *Reconciler) CountMatching(ctx context.Context, f FindingFilter, upTo int) (int64, error) {
	f.BeforeID = 0
	where, args, err := findingWhere(f)
	if err != nil {
		return 0, err
	}
	q := `SELECT 1 FROM discrepancies d`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	var n int64
	if err := r.db.WithContext(ctx).Raw(`SELECT count(*) FROM (`+q+` LIMIT ?) m`, append(args, upTo+1)...).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count findings: %w", err)
	}
	return n, nil
}

// FindingCount is how many findings of one state, kind, channel, bill date, owner and currency
// match a filter, and the sum of their amounts (minor units of Currency; "" for findings
// without an amount).
type FindingCount struct {
	State    FindingState
	Kind     Kind
	Channel  string
	BillDate string
	// Tenant is the findings' owner: a tenant ("*" included), or "" for findings about a
	// statement itself (their channel account's).
	Tenant      string
	Currency    string
	N           int64
	AmountMinor int64
}

// maxFindingCounts bounds CountFindings' rows.
const maxFindingCounts = 20000

// CountFindings counts the findings matching f (its State, BeforeID and Limit aside) per state,
// kind, channel, bill date, owner and currency, newest bill date first, at most maxFindingCounts
// rows (more says true). A Simple filter reads discrepancy_groups, which statement triggers
// keep (migration 00106): a few rows per group however many findings it holds. Any other
// filter groups the matching rows. Errors: ErrInvalid (a filter value).
func (r *Reconciler) CountFindings(ctx context.Context, f FindingFilter) ([]FindingCount, bool, error) {
	q, args, err := countSQL(f, `state, kind, channel, to_char(bill_date, 'YYYY-MM-DD') AS bill_date, tenant, currency,
		sum(n) AS n, sum(amount_minor) AS amount_minor`, `1, 2, 3, 4, 5, 6`, "")
	if err != nil {
		return nil, false, err
	}
	q += ` ORDER BY 4 DESC, 3, 2, 1, 5, 6 LIMIT ?`
	args = append(args, maxFindingCounts+1)
	var rows []FindingCount
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("count findings: %w", err)
	}
	more := len(rows) > maxFindingCounts
	if more {
		rows = rows[:maxFindingCounts]
	}
	return rows, more, nil
}

// GroupFindings counts the findings matching f (its BeforeID and Limit aside) in f.State (""
// for every state) per kind, channel and bill date — the findings page's groups — with their
// amounts per currency: the newest limit groups (bill date first, then channel and kind), one
// row per currency of each, and whether there are more. Read like CountFindings (a Simple
// filter from discrepancy_groups), folded in the database: the page gets a few hundred rows,
// never one per group row of a year of findings. Errors: ErrInvalid (a filter value).
func (r *Reconciler) GroupFindings(ctx context.Context, f FindingFilter, limit int) ([]FindingCount, bool, error) {
	if limit <= 0 || limit > 1000 {
		limit = 200
	}
	state := f.State
	if state != "" && state != FindingOpen && state != FindingResolved && state != FindingIgnored {
		return nil, false, invalidf("state", "%q is not open, resolved or ignored", state)
	}
	if !f.Simple() {
		return r.groupFindings(ctx, f, state, limit)
	}
	// From discrepancy_groups: the newest groups are of the newest bill dates, so read a window
	// of them back from the newest (discrepancy_groups_date_idx), wider until it holds more
	// than limit groups or is everything — a year of group rows is not folded per request.
	nq, nargs, err := countSQL(f, `to_char(max(bill_date), 'YYYY-MM-DD') AS newest`, `state`, state)
	if err != nil {
		return nil, false, err
	}
	var newest []*string
	if err := r.db.WithContext(ctx).Raw(nq, nargs...).Scan(&newest).Error; err != nil {
		return nil, false, fmt.Errorf("group findings: newest bill date: %w", err)
	}
	top := ""
	for _, d := range newest {
		if d != nil && *d > top {
			top = *d
		}
	}
	if top == "" {
		return nil, false, nil
	}
	day, err := time.Parse(time.DateOnly, top)
	if err != nil {
		return nil, false, fmt.Errorf("group findings: newest bill date %q: %w", top, err)
	}
	for _, days := range []int{7, 31, 127, 0} {
		f.billFrom = ""
		if days > 0 {
			f.billFrom = day.AddDate(0, 0, -days).Format(time.DateOnly)
		}
		// Fewer than limit+1 groups in a window: an older one may follow, so widen it.
		out, more, err := r.groupFindings(ctx, f, state, limit)
		if err != nil || more || days == 0 {
			return out, more, err
		}
	}
	return nil, false, nil // not reached: the last window is everything
}

// groupFindings is GroupFindings over f as it is (its bill date window included).
func (r *Reconciler) groupFindings(ctx context.Context, f FindingFilter, state FindingState, limit int) ([]FindingCount, bool, error) {
	q, args, err := countSQL(f, `kind, channel, bill_date, currency, sum(n) AS n, sum(amount_minor) AS amount_minor`, `1, 2, 3, 4`, state)
	if err != nil {
		return nil, false, err
	}
	q = `WITH c AS (` + q + `), top AS (SELECT kind, channel, bill_date FROM c WHERE n > 0 GROUP BY 1, 2, 3
		ORDER BY bill_date DESC, channel, kind LIMIT ?)
		SELECT c.kind, c.channel, to_char(c.bill_date, 'YYYY-MM-DD') AS bill_date, c.currency, c.n, c.amount_minor
		FROM c JOIN top USING (kind, channel, bill_date) WHERE c.n > 0 ORDER BY c.bill_date DESC, c.channel, c.kind, c.currency`
	args = append(args, limit+1)
	var rows []FindingCount
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("group findings: %w", err)
	}
	type gk struct {
		kind          Kind
		channel, date string
	}
	seen := map[gk]bool{}
	var out []FindingCount
	more := false
	for _, row := range rows {
		row.State = state
		k := gk{row.Kind, row.Channel, row.BillDate}
		if !seen[k] && len(seen) == limit {
			more = true
			break
		}
		seen[k] = true
		out = append(out, row)
	}
	return out, more, nil
}

// CountFindingsByState counts the findings matching f (its State, BeforeID and Limit aside) per
// state, exactly (the same sources as CountFindings).
func (r *Reconciler) CountFindingsByState(ctx context.Context, f FindingFilter) (map[FindingState]int64, error) {
	q, args, err := countSQL(f, `state, sum(n) AS n`, `1`, "")
	if err != nil {
		return nil, err
	}
	var rows []struct {
		State FindingState
		N     int64
	}
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count findings: %w", err)
	}
	out := map[FindingState]int64{}
	for _, row := range rows {
		out[row.State] = row.N
	}
	return out, nil
}

// countSQL selects cols (over state, kind, channel, bill_date, tenant, currency, n and
// amount_minor) grouped by group, from the rows a count of f reads: discrepancy_groups for a
// Simple filter, else the matching findings, one per row; of one state, or every state ("").
func countSQL(f FindingFilter, cols, group string, state FindingState) (string, []any, error) {
	f.State, f.BeforeID = "", 0
	if !f.Simple() {
		where, args, err := findingWhere(f)
		if err != nil {
			return "", nil, err
		}
		q := `SELECT d.state, d.kind, d.channel, d.bill_date, COALESCE(d.tenant, '') AS tenant, COALESCE(d.currency, '') AS currency,
			1 AS n, COALESCE(d.amount_minor, 0) AS amount_minor FROM discrepancies d`
		if state != "" {
			where, args = append(where, "d.state = ?"), append(args, string(state))
		}
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, " AND ")
		}
		return `SELECT ` + cols + ` FROM (` + q + `) c GROUP BY ` + group, args, nil
	}
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if f.Kind != "" {
		if !validKind(f.Kind) {
			return "", nil, invalidf("kind", "%q is not a kind of finding", f.Kind)
		}
		add("g.kind = ?", string(f.Kind))
	}
	if f.Channel != "" {
		add("g.channel = ?", f.Channel)
	}
	if f.BillDate != "" {
		if _, err := time.Parse(time.DateOnly, f.BillDate); err != nil {
			return "", nil, invalidf("bill_date", "%q is not YYYY-MM-DD", f.BillDate)
		}
		add("g.bill_date = ?::date", f.BillDate)
	}
	if f.billFrom != "" {
		add("g.bill_date >= ?::date", f.billFrom)
	}
	if v := f.Visible; v != nil {
		where = append(where, "(g.tenant = ANY(?::text[]) OR (g.tenant = '' AND g.channel = ANY(?::text[])))")
		args = append(args, textArray(v.Tenants), textArray(v.Channels))
	}
	if state != "" {
		add("g.state = ?", string(state))
	}
	where = append(where, "g.n > 0")
	return `SELECT ` + cols + ` FROM discrepancy_groups g WHERE ` + strings.Join(where, " AND ") + ` GROUP BY ` + group, args, nil
}

// findingWhere is f's conditions on discrepancies d.
func findingWhere(f FindingFilter) ([]string, []any, error) {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	switch {
	case f.RunID != 0 && f.RunParts: // the run and its parts: recon_runs_pkey and recon_runs_control_run_idx, then discrepancies_run_idx
		where = append(where, "d.run_id IN (SELECT p.id FROM recon_runs p WHERE p.id = ? OR p.control_run_id = ?)")
		args = append(args, f.RunID, f.RunID)
	case f.RunID != 0:
		add("d.run_id = ?", f.RunID)
	}
	if f.Kind != "" {
		if !validKind(f.Kind) {
			return nil, nil, invalidf("kind", "%q is not a kind of finding", f.Kind)
		}
		add("d.kind = ?", string(f.Kind))
	}
	if f.State != "" {
		if f.State != FindingOpen && f.State != FindingResolved && f.State != FindingIgnored {
			return nil, nil, invalidf("state", "%q is not open, resolved or ignored", f.State)
		}
		add("d.state = ?", string(f.State))
	}
	if f.Channel != "" {
		add("d.channel = ?", f.Channel)
	}
	if f.BillDate != "" {
		if _, err := time.Parse(time.DateOnly, f.BillDate); err != nil {
			return nil, nil, invalidf("bill_date", "%q is not YYYY-MM-DD", f.BillDate)
		}
		add("d.bill_date = ?::date", f.BillDate)
	}
	if f.KeyID != 0 {
		add("d.key_id = ?", f.KeyID)
	}
	if f.OrderNo != "" {
		if len(f.OrderNo) > maxOrderNo || !utf8.ValidString(f.OrderNo) || strings.ContainsFunc(f.OrderNo, unicode.IsControl) {
			return nil, nil, invalidf("order_no", "at most %d printable characters", maxOrderNo)
		}
		if prefix, ok := strings.CutSuffix(f.OrderNo, "*"); ok {
			if prefix == "" {
				return nil, nil, invalidf("order_no", "give at least the first character before *")
			}
			// text_pattern_ops (discrepancies_order_no_idx) serves a prefix LIKE.
			add(`d.merchant_order_no LIKE ? ESCAPE '\'`, likeEscaper.Replace(prefix)+"%")
		} else {
			add("d.merchant_order_no = ?", f.OrderNo)
		}
	}
	if f.AmountMin != nil || f.AmountMax != nil || f.Currency != "" {
		cur := strings.ToUpper(strings.TrimSpace(f.Currency))
		if !money.Known(cur) {
			return nil, nil, invalidf("currency", "name the currency of the amount range (ISO 4217)")
		}
		add("d.currency = ?", cur)
		if f.AmountMin != nil {
			add("d.amount_minor >= ?", *f.AmountMin)
		}
		if f.AmountMax != nil {
			add("d.amount_minor <= ?", *f.AmountMax)
		}
		if f.AmountMin != nil && f.AmountMax != nil && *f.AmountMin > *f.AmountMax {
			return nil, nil, invalidf("amount_max", "is below the smallest amount")
		}
	}
	if f.UpTo != 0 {
		add("d.id <= ?", f.UpTo)
	}
	if f.IDs != nil {
		add("d.id = ANY(?::bigint[])", int64Array(f.IDs))
	}
	if v := f.Visible; v != nil {
		where = append(where, "(d.tenant = ANY(?::text[]) OR (d.tenant IS NULL AND d.channel = ANY(?::text[])))")
		args = append(args, textArray(v.Tenants), textArray(v.Channels))
	}
	if f.BeforeID != 0 {
		add("d.id < ?", f.BeforeID)
	}
	return where, args, nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

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
	q := `SELECT ` + findingColumns + ` WHERE d.id = ?`
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

// Resolve closes an open finding as resolved with a reason of the vocabulary (Reasons(
// ActionResolve): refunded_at_channel, booked_other_day, …) and a note; audited as
// reconcile.finding.resolve by operator:NAME. Errors: ErrNotFound, ErrClosed, ErrInvalid.
func (r *Reconciler) Resolve(ctx context.Context, findingID int64, operator, reasonCode, note string) (*Finding, error) {
	reasonCode, note, err := CheckReason(ActionResolve, reasonCode, note)
	if err != nil {
		return nil, err
	}
	return r.closeFinding(ctx, findingID, operator, FindingResolved, reasonCode, note, "reconcile.finding.resolve", nil)
}

// Ignore closes an open finding as ignored, without correcting anything, with a reason of the
// vocabulary and a note; audited as reconcile.finding.ignore. Errors: ErrNotFound, ErrClosed,
// ErrInvalid.
func (r *Reconciler) Ignore(ctx context.Context, findingID int64, operator, reasonCode, note string) (*Finding, error) {
	reasonCode, note, err := CheckReason(ActionIgnore, reasonCode, note)
	if err != nil {
		return nil, err
	}
	return r.closeFinding(ctx, findingID, operator, FindingIgnored, reasonCode, note, "reconcile.finding.ignore", nil)
}

// Reopen opens a resolved or ignored finding again, with a reason of the vocabulary
// (Reasons(ActionReopen)) and a note: its resolution is cleared (the audit log keeps it) and it
// is open like a new one; audited as reconcile.finding.reopen. Errors: ErrNotFound, ErrInvalid,
// ErrNotClosed (it is open).
func (r *Reconciler) Reopen(ctx context.Context, findingID int64, operator, reasonCode, note string) (*Finding, error) {
	if err := checkOperator(operator); err != nil {
		return nil, err
	}
	reasonCode, note, err := CheckReason(ActionReopen, reasonCode, note)
	if err != nil {
		return nil, err
	}
	if r.cfg.Auditor == nil {
		return nil, errors.New("reconcile: no Auditor configured; reopening must be audited")
	}
	actor := "operator:" + operator
	var out *Finding
	err = r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		f, err := getFinding(ctx, tx, findingID, true)
		if err != nil {
			return err
		}
		if f.State == FindingOpen {
			return errs.Errorf("finding %d is open: %w", findingID, ErrNotClosed)
		}
		if err := tx.Exec(`UPDATE discrepancies SET state = 'open', resolver = NULL, reason_code = NULL, note = NULL,
			resolved_at = NULL, updated_at = now() WHERE id = ?`, findingID).Error; err != nil {
			return fmt.Errorf("reopen finding %d: %w", findingID, err)
		}
		detail := map[string]any{"kind": string(f.Kind), "channel": f.Channel, "bill_date": f.BillDate,
			"was": string(f.State), "was_reason_code": deref(f.ReasonCode), "was_resolver": deref(f.Resolver),
			"reason_code": reasonCode, "note": note}
		if f.KeyID != nil {
			detail["key_id"] = *f.KeyID
		}
		if err := r.cfg.Auditor.Record(ctx, actor, "reconcile.finding.reopen", fmt.Sprintf("finding:%d", findingID), detail); err != nil {
			return fmt.Errorf("audit reopen of finding %d: %w", findingID, err)
		}
		out, err = getFinding(ctx, tx, findingID, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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

// int64Array is ids as a PostgreSQL array literal.
func int64Array(ids []int64) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = strconv.FormatInt(id, 10)
	}
	return "{" + strings.Join(q, ",") + "}"
}

// Describe is f as a JSON object of its set fields, the way the API takes it (a bulk run
// keeps what it was asked).
func (f FindingFilter) Describe() map[string]any {
	m := map[string]any{}
	set := func(k string, v any, ok bool) {
		if ok {
			m[k] = v
		}
	}
	set("run", f.RunID, f.RunID != 0)
	set("kind", f.Kind, f.Kind != "")
	set("state", f.State, f.State != "")
	set("channel", f.Channel, f.Channel != "")
	set("bill_date", f.BillDate, f.BillDate != "")
	set("key", f.KeyID, f.KeyID != 0)
	set("order_no", f.OrderNo, f.OrderNo != "")
	set("currency", f.Currency, f.Currency != "")
	set("amount_min_minor", f.AmountMin, f.AmountMin != nil)
	set("amount_max_minor", f.AmountMax, f.AmountMax != nil)
	set("upto", f.UpTo, f.UpTo != 0)
	set("ids", f.IDs, f.IDs != nil)
	return m
}
