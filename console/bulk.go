package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// A bulk replay takes the keys picked on the search page or everything a key search matches, up
// to BulkCap keys: the preview fixes the keys, the version each was at and what a replay of each
// would do (counts by state and by prediction) and writes nothing; starting it (once, by the
// preview's HMAC confirmation) creates the run and replays each key through the same guarded
// path as a single replay (requestReplay: version-bound, four-eyes above the amount, audited),
// in the background, with progress on the run's row.

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
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// BulkItem is one key of a bulk run.
type BulkItem struct {
	RunID      int64      `json:"-"`
	Seq        int        `json:"seq"`
	KeyID      int64      `json:"key_id"`
	KeyVersion int64      `json:"key_version"`
	KeyState   string     `json:"key_state"`
	Predicted  string     `json:"predicted"`
	Result     *string    `json:"result"`
	Detail     *string    `json:"detail"`
	RequestID  *int64     `json:"request_id"`
	DoneAt     *time.Time `json:"done_at"`
}

// BulkCounts is a preview's summary.
type BulkCounts struct {
	ByState   map[string]int `json:"by_state"`
	ByOutcome map[string]int `json:"by_outcome"`
}

const bulkRunColumns = `id, operator_id, operator, filter, reason, state, total, processed, capped, counts::text AS counts,
	results::text AS results, created_at, started_at, finished_at, updated_at`

// getBulkRun reads a run; only the operator who started it sees it (its keys are within their
// tenants, not necessarily within another operator's), and only while their tenants still cover
// its keys' (scope.go).
func (s *Server) getBulkRun(ctx context.Context, op *Operator, id int64) (*BulkRun, error) {
	if err := s.inScope(ctx, op, objBulkRun, strconv.FormatInt(id, 10), false); err != nil {
		return nil, err
	}
	var rows []BulkRun
	if err := s.db.WithContext(ctx).Raw(`SELECT `+bulkRunColumns+` FROM replay_bulk_runs WHERE id = ?`, id).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read bulk run %d: %w", id, err)
	}
	if len(rows) == 0 || rows[0].OperatorID != op.ID {
		return nil, fmt.Errorf("bulk run %d: %w", id, ErrNotFound)
	}
	return &rows[0], nil
}

// bulkItems returns a run's keys in order (at most BulkCap of them by construction).
func (s *Server) bulkItems(ctx context.Context, runID int64) ([]BulkItem, error) {
	var items []BulkItem
	if err := s.db.WithContext(ctx).Raw(`SELECT run_id, seq, key_id, key_version, key_state, predicted, result, detail,
		request_id, done_at FROM replay_bulk_items WHERE run_id = ? ORDER BY seq LIMIT 5000`, runID).Scan(&items).Error; err != nil {
		return nil, fmt.Errorf("read bulk items of %d: %w", runID, err)
	}
	return items, nil
}

// matchingIDs collects the ids of up to limit+1 keys of the search, newest first.
func (s *Server) matchingIDs(ctx context.Context, op *Operator, f KeyFilter, limit int) ([]int64, error) {
	f.After, f.Limit = nil, 200
	var ids []int64
	for page := 0; page <= limit/200+1 && len(ids) <= limit; page++ {
		rows, next, err := SearchKeys(ctx, s.db, op, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == nil {
			break
		}
		f.After = next
	}
	if len(ids) > limit+1 {
		ids = ids[:limit+1]
	}
	return ids, nil
}

// countMatching counts the keys of a search up to BulkCap (more says more match): the "N" of
// "select all N matching this filter".
func (s *Server) countMatching(ctx context.Context, op *Operator, f KeyFilter) (n int, more bool, err error) {
	ids, err := s.matchingIDs(ctx, op, f, s.cfg.BulkCap)
	if err != nil {
		return 0, false, err
	}
	if len(ids) > s.cfg.BulkCap {
		return s.cfg.BulkCap, true, nil
	}
	return len(ids), false, nil
}

// matchingKeys collects up to limit+1 keys of the search, newest first, with their full rows.
func (s *Server) matchingKeys(ctx context.Context, op *Operator, f KeyFilter, limit int) ([]claim.Key, error) {
	ids, err := s.matchingIDs(ctx, op, f, limit)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var keys []claim.Key
	if err := s.db.WithContext(ctx).Raw(`SELECT `+claim.KeyColumns+` FROM idempotency_keys WHERE id IN ?`, ids).
		Scan(&keys).Error; err != nil {
		return nil, fmt.Errorf("read matching keys: %w", err)
	}
	pos := make(map[int64]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	ordered := make([]claim.Key, 0, len(keys))
	slot := make([]*claim.Key, len(ids))
	for i := range keys {
		slot[pos[keys[i].ID]] = &keys[i]
	}
	for _, k := range slot {
		if k != nil { // purged between the search and the read
			ordered = append(ordered, *k)
		}
	}
	return ordered, nil
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

// Plan encoding: "b1|expiry|nonce|capped|selected|filter|items", items "id.version.state.predicted"
// joined by "-"; filter is a URL query (its "|" escaped). Bound to the operator by the MAC.
func (s *Server) bulkMAC(op *Operator, plan string) string {
	m := hmac.New(sha256.New, s.tokenKey())
	fmt.Fprintf(m, "bulk|%d|%s", op.ID, plan)
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

// checkPlan verifies a start form's plan and token and decodes it; anything altered, another
// operator's or expired is a 400 naming the field, and nothing is written.
func (s *Server) checkPlan(op *Operator, plan, token string) (*BulkPlan, error) {
	if len(plan) > maxBody || !hmac.Equal([]byte(s.bulkMAC(op, plan)), []byte(strings.TrimSpace(token))) {
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
		return nil, inputErr("token", "this preview expired at %s; preview the bulk replay again", time.Unix(exp, 0).UTC().Format("15:04:05 UTC"))
	}
	p := &BulkPlan{Capped: parts[3] == "1", Selected: parts[4] == "1", Filter: parts[5], Plan: plan, Token: token,
		Expires: time.Unix(exp, 0), Counts: BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}}
	raw := strings.Split(parts[6], "-")
	if parts[6] == "" || len(raw) > s.cfg.BulkCap {
		return nil, inputErr("plan", "holds no keys or more than %d", s.cfg.BulkCap)
	}
	for i, r := range raw {
		f := strings.Split(r, ".")
		if len(f) != 4 {
			return nil, inputErr("plan", "key %d cannot be read", i+1)
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		version, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || !isState(claim.State(f[2])) || predictionLabels[f[3]] == "" {
			return nil, inputErr("plan", "key %d cannot be read", i+1)
		}
		p.Items = append(p.Items, BulkItem{Seq: i + 1, KeyID: id, KeyVersion: version, KeyState: f[2], Predicted: f[3]})
		p.Counts.ByState[f[2]]++
		p.Counts.ByOutcome[f[3]]++
	}
	p.Total = len(p.Items)
	return p, nil
}

// selectedKeys reads the keys op picked by id, newest first; ids outside op's tenants or gone
// are left out (the preview lists what it takes).
func (s *Server) selectedKeys(ctx context.Context, op *Operator, ids []int64) ([]claim.Key, error) {
	cond, args, none := tenantCondition(op)
	if none {
		return nil, nil
	}
	sql := `SELECT ` + claim.KeyColumns + ` FROM idempotency_keys WHERE id IN ?`
	all := append([]any{ids}, args...)
	if cond != "" {
		sql += " AND " + cond
	}
	var keys []claim.Key
	if err := s.db.WithContext(ctx).Raw(sql+" ORDER BY created_at DESC, id DESC", all...).Scan(&keys).Error; err != nil {
		return nil, fmt.Errorf("read selected keys: %w", err)
	}
	return keys, nil
}

// previewBulk fixes the keys of a bulk replay (the ids picked, else everything the search
// matches up to BulkCap) and predicts each one's outcome. It writes nothing.
func (s *Server) previewBulk(ctx context.Context, op *Operator, f KeyFilter, ids []int64) (*BulkPlan, error) {
	var keys []claim.Key
	var err error
	capped := false
	if len(ids) > 0 {
		if len(ids) > s.cfg.BulkCap {
			return nil, inputErr("id", "%d keys selected; a bulk replay takes at most %d", len(ids), s.cfg.BulkCap)
		}
		if keys, err = s.selectedKeys(ctx, op, ids); err != nil {
			return nil, err
		}
		if len(keys) == 0 {
			return nil, inputErr("id", "none of the selected keys is visible to you")
		}
	} else {
		if keys, err = s.matchingKeys(ctx, op, f, s.cfg.BulkCap); err != nil {
			return nil, err
		}
		if capped = len(keys) > s.cfg.BulkCap; capped {
			keys = keys[:s.cfg.BulkCap]
		}
		if len(keys) == 0 {
			return nil, inputErr("filter", "no key matches this search")
		}
	}
	predicted := make([]Prediction, len(keys))
	lctx, cancel := context.WithTimeout(ctx, s.cfg.BulkPreviewTimeout)
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
			predicted[i], _ = s.predict(lctx, op, &keys[i])
		}(i)
	}
	wg.Wait()
	p := &BulkPlan{Filter: f.Query().Encode(), Selected: len(ids) > 0, Capped: capped, Total: len(keys),
		Counts: BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}}
	for i, k := range keys {
		p.Counts.ByState[string(k.State)]++
		p.Counts.ByOutcome[string(predicted[i])]++
		p.Items = append(p.Items, BulkItem{Seq: i + 1, KeyID: k.ID, KeyVersion: k.Version, KeyState: string(k.State),
			Predicted: string(predicted[i])})
	}
	p.Expires = time.Now().Add(bulkPlanTTL)
	p.Plan = encodePlan(p.Expires, randomSecret(12), p.Capped, p.Selected, p.Filter, p.Items)
	p.Token = s.bulkMAC(op, p.Plan)
	return p, nil
}

// allRefused says whether a guard refuses every key of a plan (nothing to start).
func (p *BulkPlan) allRefused() bool {
	return p.Total > 0 && p.Counts.ByOutcome[string(PredictRefused)] == p.Total
}

// startBulk starts a previewed selection: checks the confirmation (this operator's, unaltered,
// not expired, not used), creates the run with its items as running, audits the start with the
// selection, and replays the keys in the background. Single-use by the confirmation's hash.
func (s *Server) startBulk(ctx context.Context, op *Operator, ip, plan, token, reason string) (*BulkRun, error) {
	p, err := s.checkPlan(op, plan, token)
	if err != nil {
		return nil, err
	}
	if reason, err = checkReason(reason); err != nil {
		return nil, err
	}
	if p.allRefused() {
		return nil, refused("nothing to start: a guard refuses all %d keys of this bulk replay", p.Total)
	}
	countsJSON, _ := json.Marshal(p.Counts)
	hash := tokenHash("bulk-start", plan)
	var runID int64
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, reason, state, total, capped, counts,
			started_at, confirm_hash) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, now(), ?)
			ON CONFLICT (confirm_hash) DO NOTHING RETURNING id`, op.ID, op.Name, p.Filter, reason, p.Total, p.Capped,
			string(countsJSON), hash).Scan(&ids).Error; err != nil {
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
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: "replay.bulk_start",
			Target: fmt.Sprintf("bulk:%d", runID), Detail: map[string]any{"filter": p.Filter, "selected": p.Selected,
				"total": p.Total, "capped": p.Capped, "counts": p.Counts, "reason": reason, "keys": keyIDs}})
	})
	if err != nil {
		return nil, err
	}
	if runID == 0 {
		var prior []int64
		_ = s.db.WithContext(ctx).Raw(`SELECT id FROM replay_bulk_runs WHERE confirm_hash = ?`, hash).Scan(&prior).Error
		if len(prior) == 1 {
			return nil, refused("this preview was already started as bulk replay %d: a preview starts once", prior[0])
		}
		return nil, refused("this preview was already started: a preview starts once")
	}
	s.background(func(bg context.Context) { s.runBulk(bg, op, ip, runID, reason) })
	return s.getBulkRun(ctx, op, runID)
}

// runBulk replays each key of a started run through requestReplay, recording each result as
// it goes. Bounded by the run's items (≤ BulkCap); stops between keys when the server closes.
func (s *Server) runBulk(ctx context.Context, op *Operator, ip string, runID int64, reason string) {
	log := s.cfg.Logger.With("bulk_run", runID)
	items, err := s.bulkItems(ctx, runID)
	if err != nil {
		log.Error("bulk replay: read items", "err", err)
		return
	}
	results := map[string]int{}
	state := "done"
	for _, it := range items {
		if ctx.Err() != nil {
			state = "cancelled"
			break
		}
		result, detail, reqID := s.bulkReplayOne(ctx, op, ip, runID, reason, it)
		results[result]++
		if err := s.db.WithContext(ctx).Exec(`UPDATE replay_bulk_items SET result = ?, detail = ?, request_id = ?, done_at = now()
			WHERE run_id = ? AND seq = ?`, result, detail, reqID, runID, it.Seq).Error; err != nil {
			log.Error("bulk replay: record item", "err", err)
		}
		resultsJSON, _ := json.Marshal(results)
		if err := s.db.WithContext(ctx).Exec(`UPDATE replay_bulk_runs SET processed = processed + 1, results = ?, updated_at = now()
			WHERE id = ?`, string(resultsJSON), runID).Error; err != nil {
			log.Error("bulk replay: record progress", "err", err)
		}
	}
	fin := context.WithoutCancel(ctx)
	err = s.db.WithContext(fin).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`UPDATE replay_bulk_runs SET state = ?, finished_at = now(), updated_at = now() WHERE id = ?`,
			state, runID).Error; err != nil {
			return err
		}
		return s.audit.Append(fin, tx, Entry{Actor: op.Actor(), IP: ip, Action: "replay.bulk_done",
			Target: fmt.Sprintf("bulk:%d", runID), Detail: map[string]any{"state": state, "results": results}})
	})
	if err != nil {
		log.Error("bulk replay: finish", "err", err)
		return
	}
	log.Info("bulk replay finished", "state", state, "results", results)
}

// bulkReplayOne replays one key of a run and says what happened: the request's outcome kind,
// "pending_approval", or "refused" with the guard's reason.
func (s *Server) bulkReplayOne(ctx context.Context, op *Operator, ip string, runID int64, reason string, it BulkItem) (string, string, *int64) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	k, err := s.getKey(qctx, op, it.KeyID)
	cancel()
	if err != nil {
		if statusOf(err) == 404 {
			return "refused", "the key is gone (purged) or no longer visible to you", nil
		}
		return "error", "the key could not be read; the error was logged", nil
	}
	token := tokenHash("bulk", strconv.FormatInt(runID, 10), strconv.Itoa(it.Seq), strconv.FormatInt(it.KeyID, 10))
	req, _, err := s.requestReplay(ctx, replayAsk{op: op, ip: ip, key: k, version: it.KeyVersion, token: token,
		reason: reason, bulkRun: &runID})
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		return "refused", re.Reason, nil
	case err != nil:
		s.cfg.Logger.Error("bulk replay: key", "bulk_run", runID, "digest", k.KeyDigest, "err", err)
		return "error", "the replay failed; the error was logged", nil
	case req.State == "pending":
		return "pending_approval", fmt.Sprintf("above the approval amount: waiting for a second operator (request %d)", req.ID), &req.ID
	}
	kind, text := "error", ""
	if req.OutcomeKind != nil {
		kind = *req.OutcomeKind
	}
	if req.Outcome != nil {
		text = *req.Outcome
	}
	return kind, text, &req.ID
}
