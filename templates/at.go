package templates

import (
	"context"
	"sync"
	"time"
)

type zoneKey struct{}

// WithZone returns ctx carrying loc, the zone the console shows times in (At reads it).
func WithZone(ctx context.Context, loc *time.Location) context.Context {
	return context.WithValue(ctx, zoneKey{}, loc)
}

// zoneOf is the zone ctx carries, UTC by default.
func zoneOf(ctx context.Context) *time.Location {
	if loc, ok := ctx.Value(zoneKey{}).(*time.Location); ok && loc != nil {
		return loc
	}
	return time.UTC
}

var zones sync.Map // name → *time.Location

// LoadZone reads an IANA zone name ("UTC", "Asia/Shanghai"), cached: the zone database is read once per name.
// "Local" and "" are refused (the server's zone means nothing to an operator).
func LoadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "" || name == "Local" || len(name) > 64 {
		return nil, errBadZone
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, errBadZone
	}
	zones.Store(name, loc)
	return loc, nil
}

type zoneError struct{}

func (zoneError) Error() string { return "not an IANA time zone" }

var errBadZone error = zoneError{}

// timeLayout is the console's one absolute time format; the zone abbreviation (or offset, e.g. "+08") ends it.
const timeLayout = "2006-01-02 15:04:05 MST"

// timeLayoutZh is the same moment as Chinese readers write dates (CLDR zh medium date).
const timeLayoutZh = "2006年1月2日 15:04:05 MST"

// whenIn is t in the context's zone in the console's format ("—" for the zero time).
func whenIn(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if zhCtx(ctx) {
		return t.In(zoneOf(ctx)).Format(timeLayoutZh)
	}
	return t.In(zoneOf(ctx)).Format(timeLayout)
}

// weekdaysZh are the weekdays as Chinese calendars write them, Sunday first (time.Weekday).
var weekdaysZh = [...]string{"周日", "周一", "周二", "周三", "周四", "周五", "周六"}

// runTime is a scheduled moment in its own zone (a recon job's), with its weekday: "Mon
// 2026-12-07 06:00 CST", or "2026年12月7日 周一 06:00 CST".
func runTime(ctx context.Context, t time.Time) string {
	if zhCtx(ctx) {
		return t.Format("2006年1月2日 ") + weekdaysZh[t.Weekday()] + t.Format(" 15:04 MST")
	}
	return t.Format("Mon 2006-01-02 15:04 MST")
}

// clock is the time of day of t in the context's zone, the zone named: "15:04 CST" (a chart's
// axis and bars).
func clock(ctx context.Context, t time.Time) string {
	return t.In(zoneOf(ctx)).Format("15:04 MST")
}
