package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// loginForm fetches the sign-in form (setting its cookie) and returns the form token.
func (c *client) loginToken() string {
	c.b.t.Helper()
	got := c.get("/login")
	m := csrfInput.FindStringSubmatch(got.Body)
	if m == nil {
		c.b.t.Fatalf("no csrf field on the sign-in form")
	}
	return m[1]
}

func (c *client) login(name, password string) resp {
	tok := c.loginToken()
	return c.post("/login", url.Values{"csrf": {tok}, "name": {name}, "password": {password}}, false)
}

func TestPassword_HashIsArgon2idAndChecks(t *testing.T) {
	t.Parallel()
	h, err := access.HashPassword("correct horse battery", cheapArgon)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=1024,t=1,p=1$") {
		t.Errorf("hash %q is not an argon2id PHC string", h)
	}
	if !access.CheckPassword(h, "correct horse battery") || access.CheckPassword(h, "correct horse batterY") {
		t.Error("CheckPassword does not tell the right password from a wrong one")
	}
	h2, _ := access.HashPassword("correct horse battery", cheapArgon)
	if h == h2 {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
}

func TestLogin_SessionCookieAndRedirect(t *testing.T) {
	b := setup(t)
	b.addOperator("alice", access.RoleViewer, "acme")
	c := b.client()
	if got := c.get("/keys?state=completed"); got.Status != 303 || got.Location != "/login?next=%2Fkeys%3Fstate%3Dcompleted" {
		t.Fatalf("page without session: %d → %q", got.Status, got.Location)
	}
	got := c.login("alice", "wrong password!!")
	if got.Status != 401 || !strings.Contains(got.Body, "wrong name or password") {
		t.Errorf("wrong password: status %d", got.Status)
	}
	tok := c.loginToken()
	got = c.post("/login", url.Values{"csrf": {tok}, "name": {"alice"}, "password": {"correct horse battery"}, "next": {"/keys"}}, false)
	if got.Status != 303 || got.Location != "/keys" {
		t.Fatalf("sign-in: %d → %q", got.Status, got.Location)
	}
	var sess *http.Cookie
	for _, ck := range (&http.Response{Header: got.Header}).Cookies() {
		if ck.Name == sessionCookie {
			sess = ck
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Secure {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP", sess)
	}
	if got := c.get("/keys"); got.Status != 200 {
		t.Errorf("signed in: /keys %d", got.Status)
	}
	var n int64
	b.db.Raw(`SELECT count(*) FROM sessions WHERE id_hash = decode(?, 'hex')`, sha256Hex(sess.Value)).Scan(&n)
	var clear int64
	b.db.Raw(`SELECT count(*) FROM sessions WHERE encode(id_hash, 'escape') = ?`, sess.Value).Scan(&clear)
	if n != 1 || clear != 0 {
		t.Errorf("sessions table: %d rows by hash (want 1), %d by clear id (want 0)", n, clear)
	}
	// Open redirect: next must stay on this site.
	c2 := b.client()
	tok = c2.loginToken()
	got = c2.post("/login", url.Values{"csrf": {tok}, "name": {"alice"}, "password": {"correct horse battery"}, "next": {"//evil.example/x"}}, false)
	if got.Location != "/" {
		t.Errorf("next=//evil.example: redirected to %q, want /", got.Location)
	}
	// Logout ends the session server-side.
	if got := c.post("/logout", nil, false); got.Status != 403 {
		t.Errorf("logout without CSRF: %d, want 403", got.Status)
	}
}

func TestLogin_SecureCookieUnderTLS(t *testing.T) {
	b := setup(t)
	b.addOperator("alice", access.RoleViewer, "acme")
	ts := httptest.NewTLSServer(b.srv.Handler())
	defer ts.Close()
	c := b.client()
	c.http.Transport = ts.Client().Transport
	b.ts.URL = ts.URL // the client's requests go to the TLS server
	got := c.login("alice", "correct horse battery")
	for _, ck := range (&http.Response{Header: got.Header}).Cookies() {
		if ck.Name == sessionCookie && !ck.Secure {
			t.Error("session cookie over TLS is not Secure")
		}
	}
	if got.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS header over TLS")
	}
}

func TestLogin_RequiresFormToken(t *testing.T) {
	b := setup(t)
	b.addOperator("alice", access.RoleViewer, "acme")
	c := b.client()
	c.loginToken()
	got := c.post("/login", url.Values{"name": {"alice"}, "password": {"correct horse battery"}}, false)
	if got.Status != 403 {
		t.Errorf("sign-in without the form token: %d, want 403", got.Status)
	}
	got = c.post("/login", url.Values{"csrf": {"guess"}, "name": {"alice"}, "password": {"correct horse battery"}}, false)
	if got.Status != 403 {
		t.Errorf("sign-in with a wrong form token: %d, want 403", got.Status)
	}
}

func TestLogin_LockoutPerUser(t *testing.T) {
	b := setup(t) // UserLimit 3
	b.addOperator("alice", access.RoleViewer, "acme")
	c := b.client()
	for i := 0; i < 3; i++ {
		if got := c.login("alice", "wrong password!!"); got.Status != 401 {
			t.Fatalf("failure %d: %d", i+1, got.Status)
		}
	}
	got := c.login("alice", "correct horse battery")
	if got.Status != 429 {
		t.Fatalf("right password after 3 failures: %d, want 429 (locked out)", got.Status)
	}
	var lockouts int64
	b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = 'login.lockout'`).Scan(&lockouts)
	if lockouts != 1 {
		t.Errorf("lockouts audited: %d, want 1", lockouts)
	}
	// Once the lockout has passed, the right password works and clears the count.
	b.exec(`UPDATE login_throttle SET locked_until = now() - interval '1 second' WHERE scope = 'user'`)
	if got := c.login("alice", "correct horse battery"); got.Status != 303 {
		t.Errorf("after the lockout: %d, want 303", got.Status)
	}
}

func TestLogin_LockoutPerAddress(t *testing.T) {
	b := setup(t) // IPLimit 6
	b.addOperator("alice", access.RoleViewer, "acme")
	c := b.client()
	for i := 0; i < 6; i++ { // different names: the per-user limit never trips
		if got := c.login("nobody"+string(rune('a'+i)), "wrong password!!"); got.Status != 401 {
			t.Fatalf("failure %d: %d", i+1, got.Status)
		}
	}
	if got := c.login("alice", "correct horse battery"); got.Status != 429 {
		t.Errorf("from a locked-out address: %d, want 429", got.Status)
	}
}

func TestSession_IdleAndAbsoluteTimeouts(t *testing.T) {
	b := setup(t)
	b.addOperator("alice", access.RoleViewer, "acme")
	idle := b.signIn("alice")
	abs := b.signIn("alice")
	live := b.signIn("alice")
	b.exec(`UPDATE sessions SET last_seen_at = now() - interval '31 minutes' WHERE csrf_token = ?`, idle.csrf)
	b.exec(`UPDATE sessions SET expires_at = now() - interval '1 second' WHERE csrf_token = ?`, abs.csrf)
	if got := idle.get("/keys"); got.Status != 303 {
		t.Errorf("idle session: %d, want redirect to sign-in", got.Status)
	}
	if got := abs.get("/keys"); got.Status != 303 {
		t.Errorf("session past its absolute lifetime: %d, want redirect", got.Status)
	}
	if got := live.get("/keys"); got.Status != 200 {
		t.Errorf("live session: %d", got.Status)
	}
	// Disabling the operator ends their sessions at once.
	if err := b.srv.ops.SetDisabled(context.Background(), access.Change{Actor: "test"}, "alice", true); err != nil {
		t.Fatal(err)
	}
	if got := live.get("/keys"); got.Status != 303 {
		t.Errorf("session of a disabled operator: %d, want redirect", got.Status)
	}
	if got := b.client().login("alice", "correct horse battery"); got.Status != 401 {
		t.Errorf("disabled operator signs in: %d, want 401", got.Status)
	}
}

func TestSecurityHeaders(t *testing.T) {
	b := setup(t)
	got := b.client().get("/login")
	h := got.Header
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP allows inline code: %q", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", h)
	}
	if strings.Contains(got.Body, "<script>") || strings.Contains(got.Body, "style=") {
		t.Error("the page has inline script or style, which the CSP would block")
	}
	if js := b.client().get("/static/htmx.min.js"); js.Status != 200 || !strings.Contains(js.Body, "htmx") {
		t.Errorf("embedded htmx: %d", js.Status)
	}
}

func TestAPI_BearerTokens(t *testing.T) {
	b := setup(t)
	b.addOperator("bot", access.RoleViewer, "acme")
	b.seedKey("acme", "payment.charge", "k1", `{"amount":1,"currency":"USD"}`, true)
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "bot", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	b.db.Raw(`SELECT count(*) FROM api_tokens WHERE position(? in encode(token_hash, 'escape')) > 0`, tok).Scan(&stored)
	if stored != 0 {
		t.Error("token stored in clear")
	}
	c := b.client()
	if got := c.api("/api/v1/keys", ""); got.Status != 401 || got.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d", got.Status)
	}
	if got := c.api("/api/v1/keys", "idemops_forged"); got.Status != 401 {
		t.Errorf("forged token: %d", got.Status)
	}
	got := c.api("/api/v1/keys", tok)
	if got.Status != 200 || !strings.Contains(got.Body, `"key":"k1"`) {
		t.Errorf("with token: %d %s", got.Status, got.Body)
	}
	if strings.Contains(got.Body, "amount") {
		t.Error("API search shows the request body")
	}
	// A session cookie does not authenticate the API, and a token does not open pages.
	if got := b.signIn("bot").get("/api/v1/keys"); got.Status != 401 {
		t.Errorf("API with a session cookie: %d, want 401", got.Status)
	}
	if err := b.srv.ops.SetDisabled(context.Background(), access.Change{Actor: "test"}, "bot", true); err != nil {
		t.Fatal(err)
	}
	if got := c.api("/api/v1/keys", tok); got.Status != 401 {
		t.Errorf("token of a disabled operator: %d, want 401", got.Status)
	}
}

// sha256Hex is how sessions are stored: the SHA-256 of the cookie's id, hex-encoded here.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
