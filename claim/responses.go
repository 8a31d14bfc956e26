package claim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// A key's stored answer lives in key_responses, partitioned by the day (UTC) it was stored
// (migration 00060), so that retention drops a day's answers with its partition instead of
// rewriting every key row. The key row's response_day says which partition holds its answer.

// ResponseDaysAhead is how many days of key_responses partitions EnsureResponsePartitions keeps
// ready after today.
const ResponseDaysAhead = 7

func responsePartition(day time.Time) string { return "key_responses_" + day.Format("20060102") }

func utcDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// EnsureResponsePartitions creates the key_responses partitions from yesterday to
// ResponseDaysAhead days after today (by the database's clock) that do not exist yet: a bounded
// handful of statements, nothing when they all exist. The claim store calls it once a day, every
// purge calls it too.
func EnsureResponsePartitions(ctx context.Context, db *gorm.DB) error {
	var today time.Time
	if err := conn(db).QueryRowContext(ctx, `SELECT (now() AT TIME ZONE 'UTC')::date::timestamp`).Scan(&today); err != nil {
		return fmt.Errorf("ensure response partitions: %w", err)
	}
	today = utcDay(today)
	for i := -1; i <= ResponseDaysAhead; i++ {
		day := today.AddDate(0, 0, i)
		name := responsePartition(day)
		var exists bool
		if err := conn(db).QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			return fmt.Errorf("ensure response partitions: %w", err)
		}
		if exists {
			continue
		}
		// A day dropped by retention is never written again (answers go to today's partition).
		var dropped bool
		if err := conn(db).QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM key_response_drops WHERE day = $1)`, day).Scan(&dropped); err != nil {
			return fmt.Errorf("ensure response partitions: %w", err)
		}
		if dropped {
			continue
		}
		_, err := conn(db).ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF key_responses FOR VALUES FROM ('%s') TO ('%s')`,
			name, day.Format(time.DateOnly), day.AddDate(0, 0, 1).Format(time.DateOnly)))
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("create response partition %s: %w", name, err)
		}
	}
	return nil
}

// ensureResponseDays makes sure, at most once a day per store, that today's and the next days'
// partitions exist before an answer is stored. A failure is logged, not returned: the partitions
// made ahead (by the last day's call or a purge) normally cover the write.
func (s *Store) ensureResponseDays(ctx context.Context) {
	day := time.Now().UTC().Unix() / 86400
	if s.partitionsDay.Load() == day {
		return
	}
	if err := EnsureResponsePartitions(context.WithoutCancel(ctx), s.db); err != nil {
		s.cfg.Logger.Warn("response partitions not ensured", "err", err)
		return
	}
	s.partitionsDay.Store(day)
}

// ResponseDays lists the days that have a key_responses partition, oldest first.
func ResponseDays(ctx context.Context, db *gorm.DB) ([]time.Time, error) {
	rows, err := conn(db).QueryContext(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'key_responses'::regclass ORDER BY c.relname`)
	if err != nil {
		return nil, fmt.Errorf("list response partitions: %w", err)
	}
	defer rows.Close()
	var days []time.Time
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		d, err := time.Parse("20060102", strings.TrimPrefix(name, "key_responses_"))
		if err != nil {
			continue // not one of ours
		}
		days = append(days, d)
	}
	return days, rows.Err()
}

// ResponseDayState says, through the (response_day, response_expires_at) index, whether a day
// holds an answer whose response period is over by its stamp (due) and one whose period still
// runs (running). A day with neither holds no answer of a live key.
func ResponseDayState(ctx context.Context, db *gorm.DB, day time.Time) (due, running bool, err error) {
	// The day's earliest and latest stamps, each the first entry of an ordered walk of the index
	// (an EXISTS with a range condition let the planner pick a scan of the table).
	var first, last *time.Time
	err = conn(db).QueryRowContext(ctx, `SELECT
		(SELECT response_expires_at FROM idempotency_keys WHERE response_day = $1::date AND response_expires_at IS NOT NULL
		 ORDER BY response_day, response_expires_at LIMIT 1),
		(SELECT response_expires_at FROM idempotency_keys WHERE response_day = $1::date AND response_expires_at IS NOT NULL
		 ORDER BY response_day DESC, response_expires_at DESC LIMIT 1)`, utcDay(day)).Scan(&first, &last)
	now := time.Now()
	due, running = first != nil && first.Before(now), last != nil && !last.Before(now)
	if err != nil {
		return false, false, fmt.Errorf("state of responses of %s: %w", day.Format(time.DateOnly), err)
	}
	return due, running, nil
}
