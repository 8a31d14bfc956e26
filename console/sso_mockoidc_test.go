package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/idemops/idemops/access"
)

// mockoidcSignIn runs the browser's side of a sign-in at mockoidc (a provider nobody here
// wrote) and returns the callback's answer and the scope the console asked for.
func (b *bundle) mockoidcSignIn(c *client) (resp, string) {
	b.t.Helper()
	start := c.get("/login/sso?next=%2Fkeys")
	if start.Status != http.StatusFound {
		b.t.Fatalf("start: %d %s", start.Status, start.Body)
	}
	authURL, _ := url.Parse(start.Location)
	req, _ := http.NewRequest("GET", start.Location, nil)
	auth := c.do(req)
	if auth.Status != http.StatusFound || !strings.HasPrefix(auth.Location, idpRedirect+"?") {
		b.t.Fatalf("authorize at mockoidc: %d %s %s", auth.Status, auth.Location, auth.Body)
	}
	cb, _ := url.Parse(auth.Location)
	return c.get("/login/sso/callback?" + cb.RawQuery), authURL.Query().Get("scope")
}

// Single sign-on by group works with a standard provider: mockoidc puts the groups claim in the
// ID token only when the groups scope is asked for, and with a group map the console asks for
// it, so jane.doe@example.com (groups engineering, design) signs in as the viewer of acme the
// map makes her. Asked only for openid email profile (as before, or by --sso-scopes), the same
// sign-in is refused for want of a mapped group (issue 35 item 8).
func TestSSOSignIn_ByGroupAtMockOIDC(t *testing.T) {
	t.Parallel()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	gm, err := access.ParseGroupMap("engineering=viewer:acme")
	if err != nil {
		t.Fatal(err)
	}
	sso := func(scopes ...string) func(*Config) {
		return func(c *Config) {
			c.SSO = &SSOConfig{Issuer: m.Issuer(), ClientID: m.Config().ClientID, ClientSecret: m.Config().ClientSecret,
				RedirectURL: idpRedirect, GroupMap: gm, Scopes: scopes}
		}
	}

	b := newBundle(t, sso())
	c := b.client()
	r, scope := b.mockoidcSignIn(c)
	if scope != "openid email profile groups" {
		t.Errorf("asked for scope %q, want openid email profile groups", scope)
	}
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `url=/keys`) {
		t.Fatalf("sign-in by group: %d %s", r.Status, r.Body)
	}
	if home := c.get("/"); home.Status != http.StatusOK || !strings.Contains(home.Body, "jane.doe@example.com") {
		t.Fatalf("after signing in: %d", home.Status)
	}
	jane, err := b.srv.ops.ByName(context.Background(), "jane.doe@example.com")
	if err != nil || jane.Role != access.RoleViewer || strings.Join(jane.Tenants, ",") != "acme" {
		t.Fatalf("mapped operator: %+v %v", jane, err)
	}
	var detail string
	b.db.Raw(`SELECT detail FROM audit_log WHERE action = 'login' AND actor = 'operator:jane.doe@example.com'`).Scan(&detail)
	mustContain(t, "audit of the sign-in", detail, `"mapping":"groups"`, `"engineering"`)

	// Without the groups scope the provider sends no groups: refused, as the red team saw it.
	b2 := newBundle(t, sso("email", "profile"))
	r, scope = b2.mockoidcSignIn(b2.client())
	if scope != "openid email profile" || r.Status != http.StatusUnauthorized ||
		!strings.Contains(r.Body, "no operator is named jane.doe@example.com and none of its groups is mapped") {
		t.Fatalf("without the groups scope (%q): %d %s", scope, r.Status, truncate(r.Body, 400))
	}
}
