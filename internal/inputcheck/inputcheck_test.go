package inputcheck

import (
	"errors"
	"testing"

	"github.com/idemops/idemops/errs"
)

func TestJSON_NamesTheFieldOfTheFirstBadString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, field, reason string
	}{
		{`{"payee":"alice","amount_minor":100}`, "", ""},
		{`{"payee":"a\u0000b"}`, "payee", "contains a NUL byte"},
		{`{"payee":"a\\u0000b"}`, "", ""}, // an escaped backslash, then the text u0000
		{"{\"payee\":\"a\xffb\"}", "payee", "is not valid UTF-8"},
		{`{"payee":"\ud800"}`, "payee", "is not valid UTF-8 (an unpaired surrogate escape)"},
		{`{"payee":"\ud83d\ude00 \ufffd �"}`, "", ""}, // a real pair, and U+FFFD sent on purpose
		{`{"items":[{"name":"ok"},{"name":"x\u0000"}]}`, "items[1].name", "contains a NUL byte"},
		{`{"a":{"b":[1,true,null,"\u0000"]}}`, "a.b[3]", "contains a NUL byte"},
		{`{"k\u0000":1}`, `"k\x00"`, "a member name contains a NUL byte"},
		{`"\u0000"`, "body", "contains a NUL byte"},
		{`{"payee":`, "", ""}, // a syntax error is the decoder's to report
	} {
		err := JSON([]byte(tc.body))
		var ie *errs.FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.body, err)
		case tc.field != "" && (!errors.As(err, &ie) || ie.Name != tc.field || ie.Why.String() != tc.reason):
			t.Errorf("%s: %v, want %s: %s", tc.body, err, tc.field, tc.reason)
		}
	}
}

func TestValues_NamesTheParameter(t *testing.T) {
	t.Parallel()
	if err := Values(map[string][]string{"tenant": {"acme"}, "state": {"ok", "x\x00"}}); err == nil || err.Error() != "state: contains a NUL byte" {
		t.Errorf("NUL value: %v", err)
	}
	if err := Values(map[string][]string{"n\xffame": {"v"}}); err == nil || err.Error() != `"n\xffame": its name is not valid UTF-8` {
		t.Errorf("bad name: %v", err)
	}
	if err := Values(map[string][]string{"q": {"日本語 ✓"}}); err != nil {
		t.Errorf("good text refused: %v", err)
	}
}
