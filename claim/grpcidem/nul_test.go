package grpcidem

import "testing"

func TestHasNUL_ReadsJSONEscapes(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want bool
	}{
		{`{"payee":"alice"}`, false},
		{`{"payee":"al\u0000ice"}`, true},
		{"{\"payee\":\"al\x00ice\"}", true},
		{`{"payee":"al\\u0000ice"}`, false}, // a backslash, then the text u0000
		{`{"payee":"al\\\u0000ice"}`, true}, // a backslash, then NUL
		{`{"payee":"\u00001"}`, true},
		{`{"payee":"\u0001"}`, false},
		{`{"payee":"ends with \\"}`, false},
	} {
		if got := hasNUL([]byte(c.doc)); got != c.want {
			t.Errorf("hasNUL(%s) = %v, want %v", c.doc, got, c.want)
		}
	}
}
