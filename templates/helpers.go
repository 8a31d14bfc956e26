package templates

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func whenp(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return when(*t)
}

func strp(s *string) string {
	if s == nil || *s == "" {
		return "—"
	}
	return *s
}

func intp(n *int) string {
	if n == nil {
		return "—"
	}
	return itoa(int64(*n))
}

// span says d in the largest whole unit that fits: "45 s", "12 min", "3 h", "2 d" (秒, 分钟,
// 小时, 天 in Chinese).
func span(ctx context.Context, d time.Duration) string {
	units := [4]string{" s", " min", " h", " d"}
	if zhCtx(ctx) {
		units = [4]string{" 秒", " 分钟", " 小时", " 天"}
	}
	switch d = d.Abs(); {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + units[0]
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + units[1]
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + units[2]
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + units[3]
	}
}

// ago is t relative to now for a past moment: "12 s ago" ("in 3 s" if t is ahead of this clock).
func ago(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if d := time.Since(t); d >= 0 {
		return tf(ctx, "%s ago", span(ctx, d))
	}
	return tf(ctx, "in %s", span(ctx, time.Until(t)))
}

// until is t relative to now for a coming moment: "in 12 s" ("due 3 s ago" once passed).
func until(ctx context.Context, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if d := time.Until(t); d >= 0 {
		return tf(ctx, "in %s", span(ctx, d))
	}
	return tf(ctx, "due %s ago", span(ctx, time.Since(t)))
}

// eventDetail is a key event's detail as indented JSON, "" when it holds nothing.
func eventDetail(d []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, d, "", "  "); err != nil {
		return string(d)
	}
	if s := out.String(); s != "{}" && s != "null" {
		return s
	}
	return ""
}

// eventTraceID is the OpenTelemetry trace id a key event was written under (claim adds it to the
// detail when the call was traced), to look the trace up in the tracing backend; "" when none.
func eventTraceID(d []byte) string {
	var v struct {
		TraceID string `json:"trace_id"`
	}
	if json.Unmarshal(d, &v) != nil || len(v.TraceID) != 32 {
		return ""
	}
	return v.TraceID
}

// answerLabel names a recorded answer kind for people.
func answerLabel(kind string) string {
	switch kind {
	case "replay":
		return "replayed from the stored response"
	case "in_progress":
		return "in progress (409)"
	case "mismatch":
		return "key reused with another request (422)"
	}
	return kind
}
