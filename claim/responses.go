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

// ResponsePartition is the name of the key_responses partition that holds day's answers (day:
// midnight UTC).
func ResponsePartition(day time.Time) string { return "key_responses_" + day.Format("20060102") }

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
		name := ResponsePartition(day)
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
