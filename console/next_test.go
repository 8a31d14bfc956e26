package console

import (
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestSafeNext_OnlySameSiteAbsolutePaths: a post-sign-in redirect that a browser could read as
// another site ("//", "/\", a scheme, a tab or newline it would drop) becomes "/".
func TestSafeNext_OnlySameSiteAbsolutePaths(t *testing.T) {
	cases := map[string]string{
		"/keys?tenant=acme":     "/keys?tenant=acme",
		"/keys/42":              "/keys/42",
		"/":                     "/",
		"":                      "/",
		"keys":                  "/",
		"//evil.example":        "/",
		"/\\evil.example":       "/",
		"/\t/evil.example":      "/",
		"/\n/evil.example":      "/",
		"/\r/evil.example":      "/",
		"/\x00/evil":            "/",
		"/\x7f/evil":            "/",
		"/a\\b":                 "/",
		"https://evil.example/": "/",
		"javascript:alert(1)":   "/",
		"/\xff\xfe":             "/",
		"/\u0085/evil":          "/",
	}
	for in, want := range cases {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAPI_OversizedJSONBodyIs413: a JSON body past the console's limit is "too large", not a
// malformed body.
func TestAPI_OversizedJSONBodyIs413(t *testing.T) {
	b := newBundle(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	olga := b.signIn("olga")
	big := map[string]string{"reason": strings.Repeat("x", 10<<20)}
	if got := olga.apiPost("/api/v1/replays/bulk", b.token("olga"), big); got.Status != 413 {
		t.Errorf("10 MB JSON body: %d, want 413", got.Status)
	}
}
