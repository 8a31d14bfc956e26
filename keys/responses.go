package keys

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// What retention reads of the key_responses partitions (claim creates them: EnsureResponsePartitions).

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
