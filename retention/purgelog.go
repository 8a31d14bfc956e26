package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/keys"
)

// startLog opens the run's purge_log row.
func (j *PurgeJob) startLog(ctx context.Context, rep *Report) error {
	var op *string
	if rep.Operation != "" {
		op = &rep.Operation
	}
	var row struct {
		ID        int64
		StartedAt time.Time
	}
	if err := j.db.WithContext(ctx).Raw(`INSERT INTO purge_log (dry_run, actor, operation, batch_size) VALUES (?, ?, ?, ?)
		RETURNING id, started_at`, rep.DryRun, rep.Actor, op, rep.BatchSize).Scan(&row).Error; err != nil {
		return fmt.Errorf("open purge log: %w", err)
	}
	rep.RunID, rep.StartedAt = row.ID, row.StartedAt
	return nil
}

// logCounts is the counts column of purge_log.
type logCounts struct {
	Deleted    Counts          `json:"deleted"`
	Tombstoned Counts          `json:"tombstoned"`
	Due        []keys.DueCount `json:"due,omitempty"`
	Complete   bool            `json:"complete"`
}

// finishLog closes the run's row, even when ctx has ended (a stopped run is recorded as such).
func (j *PurgeJob) finishLog(ctx context.Context, rep *Report, runErr error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	status, errText := "ok", ""
	switch {
	case isCanceled(runErr):
		status, errText = "stopped", runErr.Error()
	case runErr != nil:
		status, errText = "failed", runErr.Error()
	}
	counts, _ := json.Marshal(logCounts{Deleted: rep.DeletedBy, Tombstoned: rep.TombstonedBy, Due: rep.Due, Complete: rep.Complete})
	var finished time.Time
	if err := j.db.WithContext(ctx).Raw(`UPDATE purge_log SET finished_at = now(), status = ?, deleted = ?, tombstoned = ?,
		restamped = ?, counts = ?, batch_size = ?, timeouts = ?, error = NULLIF(?, '') WHERE id = ? RETURNING finished_at`,
		status, rep.Deleted, rep.Tombstoned, rep.Restamped, string(counts), rep.BatchSize, rep.Timeouts, errText, rep.RunID).
		Scan(&finished).Error; err != nil {
		j.cfg.Logger.Warn("purge log not closed", "run", rep.RunID, "err", err)
	}
	rep.FinishedAt = finished
}

func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// PurgeRun is one row of the purge history.
type PurgeRun struct {
	ID         int64
	StartedAt  time.Time
	FinishedAt *time.Time
	DryRun     bool
	Actor      string
	Operation  string
	Status     string
	Deleted    int64
	Tombstoned int64
	Restamped  int64
	// Counts is the JSON breakdown: {"deleted": {op: {state: n}}, "tombstoned": {…}, "due": […], "complete": bool}.
	Counts    json.RawMessage
	BatchSize int
	Timeouts  int
	Error     string
}

// MaxHistory bounds a page of purge history.
const MaxHistory = 500

// PurgeHistory returns purge runs newest first, at most limit (1..MaxHistory; 0: 50), older than
// run beforeID when it is positive (keyset paging).
func PurgeHistory(ctx context.Context, db *gorm.DB, beforeID int64, limit int) ([]PurgeRun, error) {
	switch {
	case limit == 0:
		limit = 50
	case limit < 0 || limit > MaxHistory:
		return nil, inputErr(ErrInvalidOptions, "limit", "must be within 1..%d, got %d", MaxHistory, limit)
	}
	var rows []purgeRunRow
	q := `SELECT id, started_at, finished_at, dry_run, actor, operation, status, deleted, tombstoned, restamped,
		counts::text AS counts, batch_size, timeouts, error FROM purge_log`
	args := []any{}
	if beforeID > 0 {
		q += ` WHERE id < ?`
		args = append(args, beforeID)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("purge history: %w", err)
	}
	out := make([]PurgeRun, len(rows))
	for i, r := range rows {
		out[i] = PurgeRun{ID: r.ID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, DryRun: r.DryRun, Actor: r.Actor,
			Status: r.Status, Deleted: r.Deleted, Tombstoned: r.Tombstoned, Restamped: r.Restamped,
			Counts: json.RawMessage(r.Counts), BatchSize: r.BatchSize, Timeouts: r.Timeouts}
		if r.Operation != nil {
			out[i].Operation = *r.Operation
		}
		if r.Error != nil {
			out[i].Error = *r.Error
		}
	}
	return out, nil
}

type purgeRunRow struct {
	ID         int64
	StartedAt  time.Time
	FinishedAt *time.Time
	DryRun     bool
	Actor      string
	Operation  *string
	Status     string
	Deleted    int64
	Tombstoned int64
	Restamped  int64
	Counts     string
	BatchSize  int
	Timeouts   int
	Error      *string
}
