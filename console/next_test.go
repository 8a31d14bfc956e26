package console

import "testing"

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
