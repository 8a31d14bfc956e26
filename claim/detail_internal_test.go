package claim

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"testing"
)

// detailJSON writes the common values by hand; whatever it writes must decode to what
// encoding/json would have written for the same pairs.
func TestDetailJSON_MatchesEncodingJSON(t *testing.T) {
	cases := [][]any{
		{"attempt", 1, "owner", "host-1/42"},
		{"status", 201, "resource_id", "p_1", "attempt", int64(3)},
		{"held", true, "needs_attention", false},
		{"quarantine_s", 2.5, "attempt", 2},
		{"reason", `say "hi"`, "version", int64(-7)},
		{"reason", `back\slash`, "also", `both " and \`},
		{"error", "tab\tnewline\n<b>&amp;</b>", "failures", 0},
		{"reason", "付款失败 ✓", "code", ""},
		{"bad", "invalid \xff utf-8"},
		{"nested", map[string]any{"a": []int{1, 2}}, "nil", nil},
		{},
	}
	for _, kv := range cases {
		got := detailJSON(kv...)
		want := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			want[kv[i].(string)] = kv[i+1]
		}
		wantJSON, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("detailJSON(%q) = %s: not JSON: %v", kv, got, err)
		}
		if err := json.Unmarshal(wantJSON, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("detailJSON(%q) = %s, want the same as %s", kv, got, wantJSON)
		}
	}
}

// A snapshot's headers are filtered and written by hand when they are already allow-listed;
// either way the result must be what the allow-list and encoding/json make of them.
func TestSnapshotHeaders_FilteredAndWrittenAsEncodingJSON(t *testing.T) {
	cases := []map[string]string{
		nil,
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json; charset=utf-8", "Location": "/v1/payments/p_1?a=1&b=<2>"},
		{"content-type": "text/plain", "Set-Cookie": "session=secret"},
		{"Location": ""},
		{"Location": "/ünïcode \"quoted\"", "X-Trace": "t"},
	}
	for _, h := range cases {
		hh := http.Header{}
		for k, v := range h {
			hh.Set(k, v)
		}
		want := SnapshotHeaders(hh)
		got := (&Snapshot{Status: 200, Headers: h}).filtered()
		if len(got.Headers) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.Headers, want)) { // nil or empty alike
			t.Errorf("filtered(%v) = %v, want %v", h, got.Headers, want)
		}
		wantJSON, _ := json.Marshal(got.Headers)
		if string(wantJSON) == "null" {
			wantJSON = []byte("{}")
		}
		if g := got.headersJSON(); string(g) != string(wantJSON) {
			t.Errorf("headersJSON(%v) = %s, want %s", got.Headers, g, wantJSON)
		}
	}
}

// Lease tokens are written in place as UUID text (PostgreSQL's uuid input); never repeated.
func TestNewToken_IsUUIDText(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		tok := newToken()
		if !re.MatchString(tok) || seen[tok] {
			t.Fatalf("token %d: %q (seen before: %v)", i, tok, seen[tok])
		}
		seen[tok] = true
	}
}
