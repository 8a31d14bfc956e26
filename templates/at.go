package templates

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The console's one way to write time. Every moment a page shows goes through the components
// of at.templ (At, Ago, Until, Clock, Day) or, inside a sentence, through whenIn, which they
// use: the operator's zone (WithZone; UTC by default) written as its offset ("UTC+08:00", never
// an abbreviation such as the ambiguous "CST"), the absolute moment in one layout per language,
// a relative one ("5 min ago", "5 分钟前") with the absolute on hover, and one duration style
// per language: whole units, a space, "ms s min h d" or "毫秒 秒 分钟 小时 天". Pages read the
// present from the context (WithClock) so tests render them at a fixed moment.

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

type clockKey struct{}

// WithClock returns ctx whose pages take now() as the present (relative times, countdowns):
// how tests render a page at a fixed moment. Without it the present is time.Now.
func WithClock(ctx context.Context, now func() time.Time) context.Context {
	return context.WithValue(ctx, clockKey{}, now)
}

// nowOf is the present for ctx's pages.
func nowOf(ctx context.Context) time.Time {
	if now, ok := ctx.Value(clockKey{}).(func() time.Time); ok && now != nil {
		return now()
	}
	return time.Now()
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

// The absolute layouts, without the zone (zoneSuffix ends them): ISO order in English, the
// CLDR zh medium date in Chinese.
const (
	timeLayout   = "2006-01-02 15:04:05"
	timeLayoutZh = "2006年1月2日 15:04:05"
	dayLayout    = "2006-01-02"
	dayLayoutZh  = "2006年1月2日"
	clockLayout  = "15:04"
)

// zoneSuffix names t's zone by its offset at t: "UTC" for UTC itself, else "UTC+08:00",
// "UTC-05:00", "UTC+05:45" (unambiguous, unlike the abbreviations "CST" or "IST").
func zoneSuffix(t time.Time) string {
	_, off := t.Zone()
	if off == 0 {
		return "UTC"
	}
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("UTC%c%02d:%02d", sign, off/3600, off%3600/60)
}

// whenIn is t in the context's zone in the console's format ("—" for the zero time):
// "2026-12-05 02:42:16 UTC+08:00", "2026年12月5日 02:42:16 UTC+08:00".
func whenIn(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	t = t.In(zoneOf(ctx))
	if zhCtx(ctx) {
		return t.Format(timeLayoutZh) + " " + zoneSuffix(t)
	}
	return t.Format(timeLayout) + " " + zoneSuffix(t)
}

// clockIn is the time of day of t in the context's zone, zone named: "15:04 UTC+08:00" (a
// chart's axis).
func clockIn(ctx context.Context, t time.Time) string {
	t = t.In(zoneOf(ctx))
	return t.Format(clockLayout) + " " + zoneSuffix(t)
}

// dayText is a calendar day (a bill date, "2026-12-04") written the language's way; a value
// that is not a day stays as it is.
func dayText(ctx context.Context, day string) string {
	d, err := time.Parse(dayLayout, day)
	if err != nil {
		return day
	}
	if zhCtx(ctx) {
		return d.Format(dayLayoutZh)
	}
	return day
}

// durationUnits are the duration style of each language: a number, a space, the unit.
var durationUnits = map[bool][5]string{
	false: {"ms", "s", "min", "h", "d"},
	true:  {"毫秒", "秒", "分钟", "小时", "天"},
}

// span says d in the largest whole unit that fits: "450 ms", "45 s", "12 min", "3 h", "2 d".
func span(ctx context.Context, d time.Duration) string { return spanUnits(ctx, d, 1) }

// duration says d in up to two whole units: "1 h 30 min", "2 min 5 s", "45 s", "350 ms" (a run's
// length, a retention period); "1 小时 30 分钟" in Chinese.
func duration(ctx context.Context, d time.Duration) string { return spanUnits(ctx, d, 2) }

func spanUnits(ctx context.Context, d time.Duration, parts int) string {
	u := durationUnits[zhCtx(ctx)]
	d = d.Abs()
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " " + u[0]
	}
	sizes := [4]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	i := 3
	for i > 0 && d < sizes[i] {
		i--
	}
	// Below two days hours stay hours ("36 h"), as an operator reads a retry window.
	if i == 3 && d < 48*time.Hour {
		i = 2
	}
	out := ""
	for n := 0; n < parts && i >= 0; n, i = n+1, i-1 {
		q := d / sizes[i]
		d -= q * sizes[i]
		if q == 0 && out != "" {
			break
		}
		if out != "" {
			out += " "
		}
		out += strconv.FormatInt(int64(q), 10) + " " + u[i+1]
		if d == 0 {
			break
		}
	}
	return out
}

// ago is t relative to the present: "12 s ago", or "in 3 s" when t is ahead of it.
func ago(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	now := nowOf(ctx)
	if d := now.Sub(t); d >= 0 {
		return tf(ctx, "%s ago", span(ctx, d))
	}
	return tf(ctx, "in %s", span(ctx, t.Sub(now)))
}

// until is a coming moment relative to the present: "in 12 s", or "overdue by 3 s" once passed.
func until(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	now := nowOf(ctx)
	if d := t.Sub(now); d >= 0 {
		return tf(ctx, "in %s", span(ctx, d))
	}
	return tf(ctx, "overdue by %s", span(ctx, now.Sub(t)))
}

// isoUTC is the machine-readable moment of a <time datetime>.
func isoUTC(t time.Time) string { return t.UTC().Format(time.RFC3339) }
