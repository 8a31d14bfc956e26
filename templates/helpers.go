package templates

import (
	"bytes"
	"encoding/json"
	"strconv"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

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
