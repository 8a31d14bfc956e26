package templates

import (
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
