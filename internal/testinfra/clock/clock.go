// Package clock holds what tests need of the wall clock itself.
package clock

import (
	"testing"
	"time"
)

// AvoidMidnight keeps a scenario inside one day of loc: when loc's midnight is less than margin
// away, it waits until the day has turned. A bill date is a day of the channel's zone, and the
// times the scenario stamps (the database's, the simulator's) must fall on it; only time passing
// turns a day, so this sleeps, and only within margin of midnight.
func AvoidMidnight(t testing.TB, loc *time.Location, margin time.Duration) {
	t.Helper()
	now := time.Now().In(loc)
	y, m, d := now.Date()
	if left := time.Date(y, m, d+1, 0, 0, 0, 0, loc).Sub(now); left < margin {
		t.Logf("waiting %s for the day to turn in %s", left, loc)
		time.Sleep(left + time.Second)
	}
}
