package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// Bulk actions: an operator resolves, ignores or recovers every open finding a filter matches
// (or those of it picked by hand). PreviewBulk says how many, for how much, with a sample, and
// writes nothing; StartBulk fixes the findings (the open ones matching, up to the newest the
// preview saw) and starts the run — at once, or once a second operator approves it when it
// holds more than Config.BulkApprovalAbove findings (four eyes) — and BulkJob, a daemon job,
// works through it with progress, each finding changed once and audited, in batches: a batch's
// findings, their audit rows and the run's progress commit together.

// Bulk run states.
const (
	BulkPendingApproval = "pending_approval"
	BulkRunning         = "running"
	BulkDone            = "done"
	BulkFailed          = "failed"
	BulkRejected        = "rejected"
)

// MaxBulkSelection bounds the findings picked by hand in one request.
const MaxBulkSelection = 1000

// bulkSample is how many findings a preview shows.
const bulkSample = 10

// BulkOperator is who asks for (or approves) a bulk run.
type BulkOperator struct {
	ID   int64
	Name string
	IP   string
}

// BulkRequest is a bulk action an operator asks for.
type BulkRequest struct {
	// Filter selects the findings (Visible set to the operator's scope); its state is open
	// whatever it says, its BeforeID and Limit are ignored.
	Filter FindingFilter
	// Selected: Filter.IDs are findings picked by hand (at most MaxBulkSelection).
	Selected   bool
	Action     string // ActionResolve, ActionIgnore or ActionRecover
	ReasonCode string
	Note       string
	By         BulkOperator
	// FourEyes makes the run wait for a second operator's approval whatever its own count: a
	// part of one action split into runs (one per tenant cell) that together hold more than
	// BulkApprovalAbove.
	FourEyes bool
}

// BulkPreview is what a bulk action would act on.
type BulkPreview struct {
	Action     string `json:"action"`
	ReasonCode string `json:"reason_code"`
	Note       string `json:"note"`
	Count      int64  `json:"count"`
	// Amounts are the findings' amounts summed per currency (minor units; "" for findings
	// without an amount is left out).
	Amounts map[string]int64 `json:"amounts"`
	// ByKind counts them per kind.
	ByKind map[Kind]int64 `json:"by_kind"`
	Sample []Finding      `json:"sample"`
	// UpTo is the newest finding the preview saw: a start with it acts on none newer.
	UpTo int64 `json:"upto"`
	// NeedsApproval: more than ApprovalAbove findings, so a second operator must approve it.
	NeedsApproval bool `json:"needs_approval"`
	ApprovalAbove int  `json:"approval_above"`
	// TooMany: more than the cap of one run (BulkCap): it cannot be started as it is.
	TooMany bool `json:"too_many"`
	Cap     int  `json:"cap"`
}

// BulkRun is one bulk run (finding_bulk_runs).
type BulkRun struct {
	ID         int64            `json:"id"`
	Action     string           `json:"action"`
	ReasonCode string           `json:"reason_code"`
	Note       string           `json:"note"`
	Filter     json.RawMessage  `json:"filter"`
	Selected   bool             `json:"selected"`
	OperatorID int64            `json:"-"`
	Operator   string           `json:"operator"`
	IP         string           `json:"-"`
	Tenants    []string         `json:"tenants"`
	State      string           `json:"state"`
	Total      int64            `json:"total"`
	Processed  int64            `json:"processed"`
	Results    map[string]int64 `json:"results"`
	Amounts    map[string]int64 `json:"amounts"`
	Approver   *string          `json:"approver,omitempty"`
	DecidedAt  *time.Time       `json:"decided_at,omitempty"`
	JobRunID   *int64           `json:"job_run_id,omitempty"`
	Error      *string          `json:"error,omitempty"`
	CreatedAt  time.Time        `json:"created_at"`
	StartedAt  *time.Time       `json:"started_at,omitempty"`
	FinishedAt *time.Time       `json:"finished_at,omitempty"`
	UpdatedAt  time.Time        `json:"updated_at"`
}

// Live says whether the run may still change (waiting for approval or running).
func (b *BulkRun) Live() bool { return b.State == BulkPendingApproval || b.State == BulkRunning }

type bulkRunRow struct {
	ID         int64
	Action     string
	ReasonCode string
	Note       string
	Filter     string
	Selected   bool
	OperatorID int64
	Operator   string
	IP         string
	Tenants    string
	State      string
	Total      int64
	Processed  int64
	Results    string
	Amounts    string
	ApproverID *int64
	Approver   *string
	DecidedAt  *time.Time
	JobRunID   *int64
	Error      *string
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	UpdatedAt  time.Time
}

func (r bulkRunRow) run() *BulkRun {
	b := &BulkRun{ID: r.ID, Action: r.Action, ReasonCode: r.ReasonCode, Note: r.Note, Filter: json.RawMessage(r.Filter),
		Selected: r.Selected, OperatorID: r.OperatorID, Operator: r.Operator, IP: r.IP, State: r.State, Total: r.Total, Processed: r.Processed,
		Results: map[string]int64{}, Amounts: map[string]int64{}, Approver: r.Approver, DecidedAt: r.DecidedAt, JobRunID: r.JobRunID,
		Error: r.Error, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, UpdatedAt: r.UpdatedAt}
	_ = json.Unmarshal([]byte(r.Tenants), &b.Tenants)
	_ = json.Unmarshal([]byte(r.Results), &b.Results)
	_ = json.Unmarshal([]byte(r.Amounts), &b.Amounts)
	return b
}

const bulkRunColumns = `id, action, reason_code, note, filter::text AS filter, selected, operator_id, operator, ip,
	array_to_json(tenants)::text AS tenants, state, total, processed, results::text AS results, amounts::text AS amounts,
	approver_id, approver, decided_at, job_run_id, error, created_at, started_at, finished_at, updated_at FROM finding_bulk_runs`

// GetBulkRun reads one bulk run (the caller decides scope by its Tenants). Errors: ErrNotFound.
func (r *Reconciler) GetBulkRun(ctx context.Context, id int64) (*BulkRun, error) {
	var rows []bulkRunRow
	if err := r.db.WithContext(ctx).Raw(`SELECT `+bulkRunColumns+` WHERE id = ?`, id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("bulk run %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bulk run %d: %w", id, ErrNotFound)
	}
	return rows[0].run(), nil
}

// ListBulkRuns lists bulk runs, waiting for approval first, then newest first (at most limit,
// ≤ 200; the caller decides scope by each run's Tenants).
func (r *Reconciler) ListBulkRuns(ctx context.Context, limit int) ([]*BulkRun, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	var rows []bulkRunRow
	if err := r.db.WithContext(ctx).Raw(`SELECT `+bulkRunColumns+` ORDER BY state = 'pending_approval' DESC, id DESC LIMIT ?`, limit).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list bulk runs: %w", err)
	}
	out := make([]*BulkRun, len(rows))
	for i, row := range rows {
		out[i] = row.run()
	}
	return out, nil
}

// checkBulk validates req and returns the filter it acts on. A preview may come before the
// action and the reason are chosen (the page's first step): it checks only an action given.
func (r *Reconciler) checkBulk(req *BulkRequest, preview bool) (FindingFilter, error) {
	f := req.Filter
	switch req.Action {
	case ActionResolve, ActionIgnore, ActionRecover:
	case "":
		if !preview {
			return f, invalidf("action", "%q is not resolve, ignore or recover", req.Action)
		}
	default:
		return f, invalidf("action", "%q is not resolve, ignore or recover", req.Action)
	}
	var err error
	if !preview {
		if req.ReasonCode, req.Note, err = CheckReason(req.Action, req.ReasonCode, req.Note); err != nil {
			return f, err
		}
	}
	if err := checkOperator(req.By.Name); err != nil {
		return f, err
	}
	if f.State != "" && f.State != FindingOpen {
		return f, invalidf("state", "a bulk action acts on open findings")
	}
	if req.Selected {
		if len(f.IDs) == 0 {
			return f, invalidf("ids", "pick at least one finding, or act on all the filter matches")
		}
		if len(f.IDs) > MaxBulkSelection {
			return f, invalidf("ids", "at most %d findings picked by hand; act on all the filter matches instead", MaxBulkSelection)
		}
	} else {
		f.IDs = nil
	}
	f.State, f.BeforeID, f.Limit = FindingOpen, 0, 0
	if _, _, err := findingWhere(f); err != nil {
		return f, err
	}
	return f, nil
}

// newestMatching is the id of the newest finding f matches (0: none); the open index, newest
// first, finds it.
func (r *Reconciler) newestMatching(ctx context.Context, f FindingFilter) (int64, error) {
	where, args, err := findingWhere(f)
	if err != nil {
		return 0, err
	}
	var ids []int64
	q := `SELECT d.id FROM discrepancies d WHERE ` + joinAnd(where) + ` ORDER BY d.id DESC LIMIT 1`
	if err := r.db.WithContext(ctx).Raw(q, args...).Scan(&ids).Error; err != nil {
		return 0, fmt.Errorf("bulk: newest finding: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return ids[0], nil
}

// PreviewBulk says what req would act on — how many open findings, their amounts per currency
// and per kind, a sample, the newest of them — and whether it needs a second operator. It
// writes nothing; the action, when given, must be one, the reason is checked at the start.
// Errors: ErrInvalid.
func (r *Reconciler) PreviewBulk(ctx context.Context, req BulkRequest) (*BulkPreview, error) {
	f, err := r.checkBulk(&req, true)
	if err != nil {
		return nil, err
	}
	upTo, err := r.newestMatching(ctx, f)
	if err != nil {
		return nil, err
	}
	p := &BulkPreview{Action: req.Action, ReasonCode: req.ReasonCode, Note: req.Note, Amounts: map[string]int64{},
		ByKind: map[Kind]int64{}, Sample: []Finding{}, UpTo: upTo, ApprovalAbove: r.cfg.BulkApprovalAbove, Cap: r.cfg.BulkCap}
	if upTo == 0 {
		return p, nil
	}
	// A filter the groups table answers is counted there (its count may include a finding
	// newer than UpTo that came in meanwhile; the start counts exactly); any other up to UpTo.
	if !f.Simple() {
		f.UpTo = upTo
	}
	counts, _, err := r.CountFindings(ctx, f)
	if err != nil {
		return nil, err
	}
	for _, c := range counts {
		if c.State != FindingOpen {
			continue
		}
		p.Count += c.N
		p.ByKind[c.Kind] += c.N
		if c.Currency != "" {
			p.Amounts[c.Currency] += c.AmountMinor
		}
	}
	f.UpTo = upTo
	f.Limit = bulkSample
	if p.Sample, err = r.ListFindings(ctx, f); err != nil {
		return nil, err
	}
	p.NeedsApproval = p.Count > int64(r.cfg.BulkApprovalAbove)
	p.TooMany = p.Count > int64(r.cfg.BulkCap)
	return p, nil
}

// StartBulk fixes the findings of req — the open ones it matches with an id up to upTo (0: up
// to the newest now) — and starts the run: running at once, asking the daemon for a pass, or
// waiting for a second operator's approval when it holds more than BulkApprovalAbove. Audited
// (reconcile.findings.bulk_start). Errors: ErrInvalid, a refusal (nothing matches, more than
// BulkCap, no batch auditor).
func (r *Reconciler) StartBulk(ctx context.Context, req BulkRequest, upTo int64) (*BulkRun, error) {
	f, err := r.checkBulk(&req, false)
	if err != nil {
		return nil, err
	}
	ba, ok := r.cfg.Auditor.(BatchAuditor)
	if !ok {
		return nil, errors.New("reconcile: bulk runs need an Auditor that records batches (LogAuditor)")
	}
	if upTo == 0 {
		if upTo, err = r.newestMatching(ctx, f); err != nil {
			return nil, err
		}
		if upTo == 0 {
			return nil, errs.Refusedf("no open finding matches: there is nothing to %s", req.Action)
		}
	}
	f.UpTo = upTo
	where, args, err := findingWhere(f)
	if err != nil {
		return nil, err
	}
	filterJSON, _ := json.Marshal(req.Filter.Describe())
	var runID int64
	err = r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(`INSERT INTO finding_bulk_runs (action, reason_code, note, filter, selected, operator_id, operator, ip, tenants,
			state, total) VALUES (?, ?, ?, ?::jsonb, ?, ?, ?, ?, '{}', 'running', 0) RETURNING id`, req.Action, req.ReasonCode, req.Note,
			string(filterJSON), req.Selected, req.By.ID, req.By.Name, req.By.IP).Scan(&runID).Error; err != nil {
			return fmt.Errorf("start bulk run: %w", err)
		}
		// The findings, fixed: one INSERT … SELECT over the filter's index (at most the cap + 1,
		// to tell "too many").
		res := tx.Exec(`INSERT INTO finding_bulk_items (run_id, finding_id) SELECT ?, d.id FROM discrepancies d WHERE `+
			joinAnd(where)+` LIMIT ?`, append(append([]any{runID}, args...), r.cfg.BulkCap+1)...)
		if res.Error != nil {
			return fmt.Errorf("start bulk run: fix its findings: %w", res.Error)
		}
		total := res.RowsAffected
		switch {
		case total == 0:
			return errs.Refusedf("no open finding matches: there is nothing to %s", req.Action)
		case total > int64(r.cfg.BulkCap):
			return errs.Refusedf("more than %d findings match; one bulk run takes at most %d: narrow the filter", r.cfg.BulkCap, r.cfg.BulkCap)
		}
		tenants, err := r.bulkTenants(ctx, tx, runID)
		if err != nil {
			return err
		}
		amounts, err := bulkAmounts(ctx, tx, runID)
		if err != nil {
			return err
		}
		state := BulkRunning
		if total > int64(r.cfg.BulkApprovalAbove) || req.FourEyes {
			state = BulkPendingApproval
		}
		tenantsJSON, _ := json.Marshal(tenants)
		amountsJSON, _ := json.Marshal(amounts)
		if err := tx.Exec(`UPDATE finding_bulk_runs SET total = ?, tenants = ARRAY(SELECT jsonb_array_elements_text(?::jsonb)),
			amounts = ?::jsonb, state = ?, started_at = CASE WHEN ? = 'running' THEN now() END, updated_at = now() WHERE id = ?`,
			total, string(tenantsJSON), string(amountsJSON), state, state, runID).Error; err != nil {
			return fmt.Errorf("start bulk run %d: %w", runID, err)
		}
		detail := map[string]any{"action": req.Action, "reason_code": req.ReasonCode, "note": req.Note, "filter": req.Filter.Describe(),
			"selected": req.Selected, "findings": total, "amounts": amounts, "state": state}
		if err := ba.RecordBatch(ctx, tx, []AuditEntry{{Actor: "operator:" + req.By.Name, IP: req.By.IP,
			Action: "reconcile.findings.bulk_start", Target: fmt.Sprintf("finding-bulk:%d", runID), Tenants: tenants,
			Detail: detail}}); err != nil {
			return fmt.Errorf("audit bulk run %d: %w", runID, err)
		}
		if state == BulkRunning {
			return requestBulkPass(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r.GetBulkRun(ctx, runID)
}

// bulkTenants is the union of the tenant sets of a run's findings: the key's tenant of a
// finding about a key, the channel account's tenants of one about a statement ("*" alone when
// any of them is every tenant's).
func (r *Reconciler) bulkTenants(ctx context.Context, tx *gorm.DB, runID int64) ([]string, error) {
	var owners []struct {
		Tenant  *string
		Channel string
	}
	if err := tx.WithContext(ctx).Raw(`SELECT DISTINCT d.tenant, CASE WHEN d.tenant IS NULL THEN d.channel ELSE '' END AS channel
		FROM finding_bulk_items i JOIN discrepancies d ON d.id = i.finding_id WHERE i.run_id = ?`, runID).Scan(&owners).Error; err != nil {
		return nil, fmt.Errorf("bulk run %d: tenants: %w", runID, err)
	}
	var out, channels []string
	for _, o := range owners {
		if o.Tenant != nil {
			out = append(out, *o.Tenant)
		} else {
			channels = append(channels, o.Channel)
		}
	}
	m, err := ChannelTenants(ctx, tx, channels)
	if err != nil {
		return nil, err
	}
	for _, ts := range m {
		out = append(out, ts...)
	}
	if slices.Contains(out, AllTenants) {
		return []string{AllTenants}, nil
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// bulkAmounts sums a run's findings' amounts per currency.
func bulkAmounts(ctx context.Context, tx *gorm.DB, runID int64) (map[string]int64, error) {
	var rows []struct {
		Currency string
		Sum      int64
	}
	if err := tx.WithContext(ctx).Raw(`SELECT d.currency, sum(d.amount_minor) AS sum FROM finding_bulk_items i
		JOIN discrepancies d ON d.id = i.finding_id WHERE i.run_id = ? AND d.currency IS NOT NULL GROUP BY d.currency`, runID).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("bulk run %d: amounts: %w", runID, err)
	}
	out := map[string]int64{}
	for _, row := range rows {
		out[row.Currency] = row.Sum
	}
	return out, nil
}

// DecideBulk approves (or rejects) a run waiting for approval, as a second operator: the one
// who started it may not. Approved, it runs (the daemon is asked for a pass). Audited
// (reconcile.findings.bulk_approve / bulk_reject). Errors: ErrNotFound, a refusal (not waiting,
// the same operator).
func (r *Reconciler) DecideBulk(ctx context.Context, runID int64, by BulkOperator, approve bool) (*BulkRun, error) {
	if err := checkOperator(by.Name); err != nil {
		return nil, err
	}
	ba, ok := r.cfg.Auditor.(BatchAuditor)
	if !ok {
		return nil, errors.New("reconcile: bulk runs need an Auditor that records batches (LogAuditor)")
	}
	state, action := BulkRunning, "reconcile.findings.bulk_approve"
	if !approve {
		state, action = BulkRejected, "reconcile.findings.bulk_reject"
	}
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []bulkRunRow
		if err := tx.Raw(`SELECT `+bulkRunColumns+` WHERE id = ? FOR UPDATE`, runID).Scan(&rows).Error; err != nil {
			return fmt.Errorf("bulk run %d: %w", runID, err)
		}
		if len(rows) == 0 {
			return fmt.Errorf("bulk run %d: %w", runID, ErrNotFound)
		}
		run := rows[0].run()
		switch {
		case run.State != BulkPendingApproval:
			return errs.Refusedf("bulk run %d is %s: only a run waiting for approval can be approved or rejected", runID,
				errs.Verbatim(run.State))
		case run.OperatorID == by.ID:
			return errs.Refusedf("four eyes: bulk run %d was started by you; a second operator approves or rejects it", runID)
		}
		if err := tx.Exec(`UPDATE finding_bulk_runs SET state = ?, approver_id = ?, approver = ?, decided_at = now(),
			started_at = CASE WHEN ? = 'running' THEN now() END, finished_at = CASE WHEN ? = 'rejected' THEN now() END,
			updated_at = now() WHERE id = ?`, state, by.ID, by.Name, state, state, runID).Error; err != nil {
			return fmt.Errorf("decide bulk run %d: %w", runID, err)
		}
		if err := ba.RecordBatch(ctx, tx, []AuditEntry{{Actor: "operator:" + by.Name, IP: by.IP, Action: action,
			Target: fmt.Sprintf("finding-bulk:%d", runID), Tenants: run.Tenants,
			Detail: map[string]any{"action": run.Action, "findings": run.Total, "started_by": run.Operator}}}); err != nil {
			return fmt.Errorf("audit bulk run %d: %w", runID, err)
		}
		if approve {
			return requestBulkPass(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r.GetBulkRun(ctx, runID)
}

// requestBulkPass asks the daemon's leader for a pass of BulkJob at its next poll, creating the
// job's schedule when no daemon has made it yet (a daemon started later then runs it at once).
func requestBulkPass(ctx context.Context, tx *gorm.DB) error {
	err := daemon.RunNow(ctx, tx, BulkJobName)
	if errors.Is(err, daemon.ErrUnknownSchedule) {
		if err = daemon.SaveSchedule(ctx, tx, daemon.ScheduleSpec{Name: BulkJobName, Job: BulkJobName, Spec: BulkJobSpec}); err == nil {
			err = daemon.RunNow(ctx, tx, BulkJobName)
		}
	}
	return err
}

func joinAnd(where []string) string {
	if len(where) == 0 {
		return "true"
	}
	out := where[0]
	for _, w := range where[1:] {
		out += " AND " + w
	}
	return out
}
