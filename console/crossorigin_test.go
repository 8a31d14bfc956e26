package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// A browser's cross-site POST is refused 403 by http.CrossOriginProtection even with the right
// CSRF token; the same POST from the console's own origin (or from a client that is not a
// browser) passes.
func TestCrossOriginProtection_RefusesCrossSitePosts(t *testing.T) {
	b := setup(t)
	b.addOperator("vera", access.RoleViewer, "acme")
	c := b.signIn("vera")
	logout := func(headers ...string) resp {
		t.Helper()
		form := url.Values{"csrf": {c.csrf}}
		req, _ := http.NewRequest("POST", b.ts.URL+"/logout", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		return c.do(req)
	}
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "http://evil.example"},
	} {
		got := logout(h...)
		if got.Status != http.StatusForbidden {
			t.Fatalf("POST /logout with %s: %s: status %d, want 403", h[0], h[1], got.Status)
		}
		mustContain(t, "refusal page", got.Body, "form token")
	}
	// Refused requests did nothing: the session still works.
	if got := c.get("/"); got.Status != http.StatusOK {
		t.Fatalf("session ended by a refused cross-site POST: GET / = %d", got.Status)
	}
	if got := logout("Sec-Fetch-Site", "same-origin", "Origin", b.ts.URL); got.Status != http.StatusSeeOther {
		t.Fatalf("same-origin POST /logout: status %d, want 303", got.Status)
	}
	// (Every other test posts without Sec-Fetch-Site or Origin, as a non-browser client does, and passes.)
	if got := c.get("/"); got.Status == http.StatusOK {
		t.Fatalf("same-origin logout did not end the session")
	}
}
