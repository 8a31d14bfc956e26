package claim

import (
	"encoding/json"
	"reflect"
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
