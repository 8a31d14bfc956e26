package replay

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// A bulk replay takes the keys picked on the search page or everything a key search matches, up
// to BulkCap keys: the preview fixes the keys, the version each was at and what a replay of each
// would do (counts by state and by prediction) and writes nothing; starting it (once, by the
// preview's HMAC confirmation) stores the run and its items and asks the daemon to run BulkJob,
// which replays each key through the same guarded path as a single replay (version-bound,
// four-eyes above the amount, audited), with progress on the run's row and in job_runs.

// BulkRun is one bulk replay (replay_bulk_runs).
type BulkRun struct {
	ID         int64      `json:"id"`
	OperatorID int64      `json:"-"`
	Operator   string     `json:"operator"`
	Filter     string     `json:"filter"`
	Reason     *string    `json:"reason"`
	State      string     `json:"state"`
	Total      int        `json:"total"`
	Processed  int        `json:"processed"`
	Capped     bool       `json:"capped"`
	Counts     claim.JSON `json:"counts"`
	Results    claim.JSON `json:"results"`
	JobRunID   *int64     `json:"job_run_id"`
	Error      *string    `json:"error,omitempty"`
	// RecheckAt is when a waiting run's next parked key is looked at again.
	RecheckAt  *time.Time `json:"recheck_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// BulkItem is one key of a bulk run.
type BulkItem struct {
	RunID      int64   `json:"-"`
	Seq        int     `json:"seq"`
	KeyID      int64   `json:"key_id"`
	KeyVersion int64   `json:"key_version"`
	KeyState   string  `json:"key_state"`
	Predicted  string  `json:"predicted"`
	Result     *string `json:"result"`
	Detail     *string `json:"detail"`
	// DetailPhrase is Detail as a phrase, for a console that says it in the operator's language;
	// not Valid for items recorded before it was stored, or whose detail has no phrase.
	DetailPhrase errs.NullPhrase `json:"-"`
	RequestID    *int64          `json:"request_id"`
	DoneAt       *time.Time      `json:"done_at"`
	// RecheckAt is when the bulk job looks again at a parked key (nil: not parked, or its
	// re-checks are used up); Checks how often it has.
	RecheckAt *time.Time `json:"recheck_at,omitempty"`
	Checks    int        `json:"checks"`
}

// Parked reports whether the item's key is parked (downstream said not found once, or could
// not answer) rather than done with.
func (it BulkItem) Parked() bool { return it.Result != nil && parkedResult(*it.Result) }

// parkedResult: the results that leave a key parked for a later look.
func parkedResult(result string) bool { return result == "not_found_once" || result == "lookup_error" }

// BulkCounts is a preview's summary.
type BulkCounts struct {
	ByState   map[string]int `json:"by_state"`
	ByOutcome map[string]int `json:"by_outcome"`
}

const bulkRunColumns = `id, operator_id, operator, filter, reason, state, total, processed, capped, counts::text AS counts,
	results::text AS results, job_run_id, error, recheck_at, created_at, started_at, finished_at, updated_at`

// BulkRun reads a run, whoever started it (the caller decides scope); ErrNotFound when there is
// none.
func (w *Workflow) BulkRun(ctx context.Context, id int64) (*BulkRun, error) {
	var rows []BulkRun
	if err := w.db.WithContext(ctx).Raw(`SELECT `+bulkRunColumns+` FROM replay_bulk_runs WHERE id = ?`, id).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read bulk run %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bulk run %d: %w", id, ErrNotFound)
	}
	return &rows[0], nil
}

// BulkItems returns a run's keys in order (at most BulkCap of them by construction).
func (w *Workflow) BulkItems(ctx context.Context, runID int64) ([]BulkItem, error) {
	var items []BulkItem
	if err := w.db.WithContext(ctx).Raw(`SELECT run_id, seq, key_id, key_version, key_state, predicted, result, detail,
		detail_phrase::text AS detail_phrase, request_id, done_at, recheck_at, checks FROM replay_bulk_items WHERE run_id = ? ORDER BY seq LIMIT 5000`, runID).Scan(&items).Error; err != nil {
		return nil, fmt.Errorf("read bulk items of %d: %w", runID, err)
	}
	return items, nil
}

// bulkLookups is how many downstream lookups a bulk preview runs at once.
const bulkLookups = 4

// bulkPlanTTL is how long a bulk preview can be started from.
const bulkPlanTTL = 30 * time.Minute

// BulkPlan is a bulk preview: the keys it fixes with their versions, states and predictions,
// and the confirmation that starts exactly them. A preview writes nothing; Plan and Token travel
// in the start form (hidden fields) and come back with it.
type BulkPlan struct {
	Filter   string     `json:"filter"`
	Selected bool       `json:"selected"` // keys picked by hand on the search page, not the whole filter
	Capped   bool       `json:"capped"`
	Total    int        `json:"total"`
	Counts   BulkCounts `json:"counts"`
	Items    []BulkItem `json:"items"`
	// Plan is the selection as the start form carries it, Token its HMAC for this operator.
	Plan    string    `json:"plan"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires_at"`
}

// AllRefused says whether a guard refuses every key of a plan (nothing to start).
func (p *BulkPlan) AllRefused() bool {
	return p.Total > 0 && p.Counts.ByOutcome[string(PredictRefused)] == p.Total
}

// BulkSelection is what a bulk preview covers: keys read within the actor's scope, newest
// first, and how they were chosen.
type BulkSelection struct {
	// Filter is the key search, as its URL query.
	Filter string
	// Selected: the keys were picked by hand rather than the whole filter.
	Selected bool
	// Keys are the keys, at most BulkCap+1 (one more says more matched: the plan is capped).
	Keys []claim.Key
}

// PreviewBulk fixes the keys of a bulk replay and predicts each one's outcome (the Operation's
// Lookup, at most bulkLookups at once, within BulkPreviewTimeout). It writes nothing.
func (w *Workflow) PreviewBulk(ctx context.Context, a Actor, sel BulkSelection) (*BulkPlan, error) {
	keys, capped := sel.Keys, false
	if capped = len(keys) > w.cfg.BulkCap; capped {
		keys = keys[:w.cfg.BulkCap]
	}
	predicted := make([]Prediction, len(keys))
	lctx, cancel := context.WithTimeout(ctx, w.cfg.BulkPreviewTimeout)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, bulkLookups)
	for i := range keys {
		if keys[i].ReplayRefusal() != "" {
			predicted[i] = PredictRefused
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			defer func() { // predict recovers an Operation's panic; this is for anything else
				if p := claim.RecoveredPanic("preview", recover()); p != nil {
					w.log.Error("bulk preview panicked", "key", keys[i].KeyDigest, "panic_type", p.Type)
					predicted[i] = PredictLookupError
				}
			}()
			predicted[i], _ = w.predict(lctx, a, &keys[i])
		}(i)
	}
	wg.Wait()
	p := &BulkPlan{Filter: sel.Filter, Selected: sel.Selected, Capped: capped, Total: len(keys),
		Counts: BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}}
	for i, k := range keys {
		p.Counts.ByState[string(k.State)]++
		p.Counts.ByOutcome[string(predicted[i])]++
		p.Items = append(p.Items, BulkItem{Seq: i + 1, KeyID: k.ID, KeyVersion: k.Version, KeyState: string(k.State),
			Predicted: string(predicted[i])})
	}
	p.Expires = time.Now().Add(bulkPlanTTL)
	p.Plan = encodePlan(p.Expires, nonce(12), p.Capped, p.Selected, p.Filter, p.Items)
	p.Token = w.bulkMAC(a.ID, p.Plan)
	return p, nil
}

// Plan encoding: "b1|expiry|nonce|capped|selected|filter|items", items "id.version.state.predicted"
// joined by "-"; filter is a URL query (its "|" escaped). Bound to the operator by the MAC.
func (w *Workflow) bulkMAC(operatorID int64, plan string) string {
	m := hmac.New(sha256.New, w.tokenKey)
	fmt.Fprintf(m, "bulk|%d|%s", operatorID, plan)
	return hex.EncodeToString(m.Sum(nil))
}

func encodePlan(exp time.Time, nonce string, capped, selected bool, filter string, items []BulkItem) string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "b1|%d|%s|%s|%s|%s|", exp.Unix(), nonce, b(capped), b(selected), filter)
	for i, it := range items {
		if i > 0 {
			sb.WriteByte('-')
		}
		fmt.Fprintf(&sb, "%d.%d.%s.%s", it.KeyID, it.KeyVersion, it.KeyState, it.Predicted)
	}
	return sb.String()
}

// maxPlan bounds a start form's plan (BulkCap items of about 60 bytes, and the filter).
const maxPlan = 1 << 20

// keyStates are the states a plan's items may name.
var keyStates = []string{string(claim.StateProcessing), string(claim.StateCompleted), string(claim.StateFailedRetryable),
	string(claim.StateFailedFinal)}

// checkPlan verifies a start form's plan and token and decodes it; anything altered, another
// operator's or expired is an *errs.FieldError naming the field, and nothing is written.
func (w *Workflow) checkPlan(a Actor, plan, token string) (*BulkPlan, error) {
	if len(plan) > maxPlan || !hmac.Equal([]byte(w.bulkMAC(a.ID, plan)), []byte(strings.TrimSpace(token))) {
		return nil, inputErr("token", "is not a bulk preview of yours or was altered; preview the bulk replay again")
	}
	parts := strings.SplitN(plan, "|", 7)
	if len(parts) != 7 || parts[0] != "b1" {
		return nil, inputErr("plan", "cannot be read; preview the bulk replay again")
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, inputErr("plan", "cannot be read; preview the bulk replay again")
	}
	if time.Now().After(time.Unix(exp, 0)) {
		return nil, inputErr("token", "this preview expired at %s; preview the bulk replay again", time.Unix(exp, 0).UTC())
	}
	p := &BulkPlan{Capped: parts[3] == "1", Selected: parts[4] == "1", Filter: parts[5], Plan: plan, Token: token,
		Expires: time.Unix(exp, 0), Counts: BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}}
	raw := strings.Split(parts[6], "-")
	if parts[6] == "" || len(raw) > w.cfg.BulkCap {
		return nil, inputErr("plan", "holds no keys or more than %d", w.cfg.BulkCap)
	}
	for i, r := range raw {
		f := strings.Split(r, ".")
		if len(f) != 4 {
			return nil, inputErr("plan", "key %d cannot be read", i+1)
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		version, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || !slices.Contains(keyStates, f[2]) || !slices.Contains(Predictions, Prediction(f[3])) {
			return nil, inputErr("plan", "key %d cannot be read", i+1)
		}
		p.Items = append(p.Items, BulkItem{Seq: i + 1, KeyID: id, KeyVersion: version, KeyState: f[2], Predicted: f[3]})
		p.Counts.ByState[f[2]]++
		p.Counts.ByOutcome[f[3]]++
	}
	p.Total = len(p.Items)
	return p, nil
}

// StartBulk starts a previewed selection: checks the confirmation (a's, unaltered, not expired,
// not used), stores the run with its items as running, with a's tenants and address for the
// job to act under, audits the start with the selection, and asks the daemon to run BulkJob
// now. Single-use by the confirmation's hash. Errors: *errs.FieldError, *errs.RefusedError.
func (w *Workflow) StartBulk(ctx context.Context, a Actor, plan, token, reason string) (*BulkRun, error) {
	p, err := w.checkPlan(a, plan, token)
	if err != nil {
		return nil, err
	}
	if reason, err = CheckReason(reason); err != nil {
		return nil, err
	}
	if p.AllRefused() {
		return nil, refused("nothing to start: a guard refuses all %d keys of this bulk replay", p.Total)
	}
	countsJSON, _ := json.Marshal(p.Counts)
	tenantsJSON, _ := json.Marshal(append([]string{}, a.Tenants...))
	hash := tokenHash("bulk-start", plan)
	var runID int64
	err = w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, reason, state, total, capped, counts,
			started_at, confirm_hash, tenants, ip)
			VALUES (?, ?, ?, ?, 'running', ?, ?, ?, now(), ?, ARRAY(SELECT jsonb_array_elements_text(?::jsonb)), ?)
			ON CONFLICT (confirm_hash) DO NOTHING RETURNING id`, a.ID, a.Name, p.Filter, reason, p.Total, p.Capped,
			string(countsJSON), hash, string(tenantsJSON), a.IP).Scan(&ids).Error; err != nil {
			return fmt.Errorf("insert bulk run: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		runID = ids[0]
		// 100 rows per statement: a 500-key run is five round trips.
		for start := 0; start < len(p.Items); start += 100 {
			end := min(start+100, len(p.Items))
			var sb strings.Builder
			args := make([]any, 0, 6*(end-start))
			sb.WriteString(`INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted) VALUES `)
			for i := start; i < end; i++ {
				if i > start {
					sb.WriteString(", ")
				}
				it := p.Items[i]
				sb.WriteString("(?, ?, ?, ?, ?, ?)")
				args = append(args, runID, it.Seq, it.KeyID, it.KeyVersion, it.KeyState, it.Predicted)
			}
			if err := tx.Exec(sb.String(), args...).Error; err != nil {
				return fmt.Errorf("insert bulk items: %w", err)
			}
		}
		keyIDs := make([]int64, len(p.Items))
		for i, it := range p.Items {
			keyIDs[i] = it.KeyID
		}
		tenants, err := bulkTenants(tx, runID)
		if err != nil {
			return err
		}
		if err := w.audit.Append(ctx, tx, audit.Entry{Actor: a.Ref(), IP: a.IP, Action: "replay.bulk_start",
			Target: fmt.Sprintf("bulk:%d", runID), Tenants: tenants, Detail: map[string]any{"filter": p.Filter, "selected": p.Selected,
				"total": p.Total, "capped": p.Capped, "counts": p.Counts, "reason": reason, "keys": keyIDs}}); err != nil {
			return err
		}
		return requestBulkPass(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	if runID == 0 {
		var prior []int64
		_ = w.db.WithContext(ctx).Raw(`SELECT id FROM replay_bulk_runs WHERE confirm_hash = ?`, hash).Scan(&prior).Error
		if len(prior) == 1 {
			return nil, refused("this preview was already started as bulk replay %d: a preview starts once", prior[0])
		}
		return nil, refused("this preview was already started: a preview starts once")
	}
	return w.BulkRun(ctx, runID)
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

// bulkTenants is the tenant set of bulk run id, for its audit rows: the tenants of its keys.
func bulkTenants(tx *gorm.DB, id int64) ([]string, error) {
	var tenants []string
	if err := tx.Raw(`SELECT DISTINCT k.tenant FROM replay_bulk_items i JOIN idempotency_keys k ON k.id = i.key_id
		WHERE i.run_id = ? ORDER BY 1`, id).Scan(&tenants).Error; err != nil {
		return nil, fmt.Errorf("bulk run %d: tenants: %w", id, err)
	}
	return tenants, nil
}
