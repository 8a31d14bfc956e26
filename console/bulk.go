package console

import (
	"context"
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

// A bulk replay takes everything a key search matches, up to BulkCap keys: the preview fixes
// the keys, the version each was at and what a replay of each would do (counts by state and by
// prediction); starting it (once: previewed → running) replays each key through the same guarded
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

// getBulkRun reads a run; only the operator who previewed it sees it (its keys are within their
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

// matchingKeys collects up to limit+1 keys of the search, newest first, with their full rows.
func (s *Server) matchingKeys(ctx context.Context, op *Operator, f KeyFilter, limit int) ([]claim.Key, error) {
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

// previewBulk fixes the keys of a bulk replay and predicts each one's outcome.
func (s *Server) previewBulk(ctx context.Context, op *Operator, ip string, f KeyFilter) (*BulkRun, error) {
	keys, err := s.matchingKeys(ctx, op, f, s.cfg.BulkCap)
	if err != nil {
		return nil, err
	}
	capped := len(keys) > s.cfg.BulkCap
	if capped {
		keys = keys[:s.cfg.BulkCap]
	}
	if len(keys) == 0 {
		return nil, inputErr("filter", "no key matches this search")
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
	counts := BulkCounts{ByState: map[string]int{}, ByOutcome: map[string]int{}}
	for i, k := range keys {
		counts.ByState[string(k.State)]++
		counts.ByOutcome[string(predicted[i])]++
	}
	countsJSON, _ := json.Marshal(counts)
	filter := f.Query().Encode()
	var run BulkRun
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, total, capped, counts)
			VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, op.ID, op.Name, filter, len(keys), capped, string(countsJSON)).
			Scan(&ids).Error; err != nil {
			return fmt.Errorf("insert bulk run: %w", err)
		}
		run.ID = ids[0]
		// 100 rows per statement: a 500-key run is five round trips.
		for start := 0; start < len(keys); start += 100 {
			end := min(start+100, len(keys))
			var sb strings.Builder
			args := make([]any, 0, 6*(end-start))
			sb.WriteString(`INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted) VALUES `)
			for i := start; i < end; i++ {
				if i > start {
					sb.WriteString(", ")
				}
				sb.WriteString("(?, ?, ?, ?, ?, ?)")
				args = append(args, run.ID, i+1, keys[i].ID, keys[i].Version, string(keys[i].State), string(predicted[i]))
			}
			if err := tx.Exec(sb.String(), args...).Error; err != nil {
				return fmt.Errorf("insert bulk items: %w", err)
			}
		}
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: "replay.bulk_preview",
			Target: fmt.Sprintf("bulk:%d", run.ID), Tenant: f.Tenant,
			Detail: map[string]any{"filter": filter, "total": len(keys), "capped": capped, "counts": counts}})
	})
	if err != nil {
		return nil, err
	}
	return s.getBulkRun(ctx, op, run.ID)
}

// startBulk starts a previewed run once, with a reason, and replays its keys in the background.
func (s *Server) startBulk(ctx context.Context, op *Operator, ip string, id int64, reason string) (*BulkRun, error) {
	run, err := s.getBulkRun(ctx, op, id)
	if err != nil {
		return nil, err
	}
	if reason, err = checkReason(reason); err != nil {
		return nil, err
	}
	started := false
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`UPDATE replay_bulk_runs SET state = 'running', reason = ?, started_at = now(), updated_at = now()
			WHERE id = ? AND state = 'previewed' AND operator_id = ? RETURNING id`, reason, id, op.ID).Scan(&ids).Error; err != nil {
			return fmt.Errorf("start bulk run %d: %w", id, err)
		}
		if started = len(ids) == 1; !started {
			return nil
		}
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: "replay.bulk_start",
			Target: fmt.Sprintf("bulk:%d", id), Detail: map[string]any{"total": run.Total, "reason": reason, "filter": run.Filter}})
	})
	if err != nil {
		return nil, err
	}
	if !started {
		return nil, refused("bulk replay %d is %s: it is started once", id, run.State)
	}
	s.background(func(bg context.Context) { s.runBulk(bg, op, ip, id, reason) })
	return s.getBulkRun(ctx, op, id)
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
