package console

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
)

// testIdP is an OpenID provider in the test process: a real discovery document and JWKS, ID
// tokens signed RS256 with its own key, and a token endpoint that checks the code, the
// redirect URI, the client secret and the PKCE verifier.
type testIdP struct {
	t     *testing.T
	ts    *httptest.Server
	key   *rsa.PrivateKey
	mu    sync.Mutex
	codes map[string]idpGrant
	// user is who signs in at the next /authorize; tamper changes the next ID token's claims.
	user   map[string]any
	tamper func(map[string]any)
}

type idpGrant struct {
	challenge, nonce, redirect string
	claims                     map[string]any
}

const (
	idpClientID     = "idemops-console"
	idpClientSecret = "client-secret-for-tests"
	// The console's public name as registered at the provider; the test client sends the
	// callback to the test server (as a proxy in front of the console would).
	idpRedirect = "https://console.example/login/sso/callback"
)

func newTestIdP(t *testing.T) *testIdP {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &testIdP{t: t, key: key, codes: map[string]idpGrant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		u := p.ts.URL
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": u, "authorization_endpoint": u + "/authorize",
			"token_endpoint": u + "/token", "jwks_uri": u + "/jwks", "response_types_supported": []string{"code"},
			"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
			"code_challenge_methods_supported": []string{"S256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
			"n": b64.EncodeToString(key.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(key.E)).Bytes())}}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != idpClientID || q.Get("response_type") != "code" || q.Get("redirect_uri") != idpRedirect ||
			q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" ||
			!strings.Contains(q.Get("scope"), "openid") {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		code := access.RandomSecret(16)
		p.codes[code] = idpGrant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri"), claims: p.user}
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
		}
		p.mu.Lock()
		g, found := p.codes[r.PostFormValue("code")]
		delete(p.codes, r.PostFormValue("code")) // one use
		tamper := p.tamper
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
		w.Header().Set("Content-Type", "application/json")
		if id != idpClientID || secret != idpClientSecret || !found || r.PostFormValue("grant_type") != "authorization_code" ||
			r.PostFormValue("redirect_uri") != g.redirect || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		claims := map[string]any{"iss": p.ts.URL, "sub": "sub-" + access.RandomSecret(4), "aud": idpClientID,
			"iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix(), "nonce": g.nonce}
		for k, v := range g.claims {
			claims[k] = v
		}
		if tamper != nil {
			tamper(claims)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + access.RandomSecret(8), "token_type": "Bearer",
			"expires_in": 300, "id_token": p.sign(claims)})
	})
	p.ts = httptest.NewServer(mux)
	t.Cleanup(p.ts.Close)
	return p
}

func (p *testIdP) sign(claims map[string]any) string {
	b64 := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "k1"})
	body, _ := json.Marshal(claims)
	signing := b64.EncodeToString(h) + "." + b64.EncodeToString(body)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		p.t.Fatal(err)
	}
	return signing + "." + b64.EncodeToString(sig)
}

func ssoBundle(t *testing.T, idp *testIdP, mod ...func(*Config)) *bundle {
	gm, err := access.ParseGroupMap("idemops-finance=operator:acme,globex; idemops-viewers=viewer:initech; idemops-admins=admin:*")
	if err != nil {
		t.Fatal(err)
	}
	return newBundle(t, append([]func(*Config){func(c *Config) {
		c.SSO = &SSOConfig{Issuer: idp.ts.URL, ClientID: idpClientID, ClientSecret: idpClientSecret, RedirectURL: idpRedirect,
			AllowedDomains: []string{"example.com"}, GroupMap: gm}
	}}, mod...)...)
}

// ssoSignIn runs the browser's side of the flow for who (ID token claims) and returns the
// callback's answer. stateOf may change the state sent back to the console.
func (b *bundle) ssoSignIn(c *client, idp *testIdP, who map[string]any, tamper func(map[string]any), stateOf func(string) string) resp {
	b.t.Helper()
	idp.mu.Lock()
	idp.user, idp.tamper = who, tamper
	idp.mu.Unlock()
	start := c.get("/login/sso?next=%2Fkeys")
	if start.Status != http.StatusFound || !strings.HasPrefix(start.Location, idp.ts.URL+"/authorize?") {
		b.t.Fatalf("start: %d %s %s", start.Status, start.Location, start.Body)
	}
	req, _ := http.NewRequest("GET", start.Location, nil)
	auth := c.do(req)
	if auth.Status != http.StatusFound || !strings.HasPrefix(auth.Location, idpRedirect+"?") {
		b.t.Fatalf("authorize: %d %s %s", auth.Status, auth.Location, auth.Body)
	}
	cb, _ := url.Parse(auth.Location)
	q := cb.Query()
	if stateOf != nil {
		q.Set("state", stateOf(q.Get("state")))
	}
	return c.get("/login/sso/callback?" + q.Encode())
}

func (b *bundle) auditCount(action string) int64 {
	var n int64
	if err := b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = ?`, action).Scan(&n).Error; err != nil {
		b.t.Fatal(err)
	}
	return n
}

func TestSSOSignIn(t *testing.T) {
	idp := newTestIdP(t)
	b := ssoBundle(t, idp)
	b.addOperator("bob@example.com", access.RoleViewer, "acme")

	login := b.client().get("/login")
	mustContain(t, "login page", login.Body, "Sign in with SSO", `name="password"`)

	// By mapping: the group gives role and tenants; the operator is made on first sign-in.
	c := b.client()
	r := b.ssoSignIn(c, idp, map[string]any{"email": "Ann@Example.com", "email_verified": true,
		"groups": []any{"idemops-finance", "idemops-viewers", "unmapped"}}, nil, nil)
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `url=/keys`) {
		t.Fatalf("mapped sign-in: %d %s", r.Status, r.Body)
	}
	home := c.get("/")
	if home.Status != http.StatusOK || !strings.Contains(home.Body, "ann@example.com") {
		t.Fatalf("after mapped sign-in: %d %s", home.Status, home.Location)
	}
	ann, err := b.srv.ops.ByName(context.Background(), "ann@example.com")
	if err != nil || ann.Role != access.RoleOperator || strings.Join(ann.Tenants, ",") != "acme,globex,initech" {
		t.Fatalf("mapped operator: %+v %v", ann, err)
	}
	if _, err := b.srv.ops.Authenticate(context.Background(), "ann@example.com", "sso:no-password"); err == nil {
		t.Fatal("an SSO-made operator must have no usable password")
	}
	// The mapping follows the provider: fewer groups next time, less access.
	c2 := b.client()
	if r := b.ssoSignIn(c2, idp, map[string]any{"email": "ann@example.com", "email_verified": true,
		"groups": []any{"idemops-viewers"}}, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("second mapped sign-in: %d %s", r.Status, r.Body)
	}
	if ann, _ = b.srv.ops.ByName(context.Background(), "ann@example.com"); ann.Role != access.RoleViewer || strings.Join(ann.Tenants, ",") != "initech" {
		t.Fatalf("re-mapped operator: %+v", ann)
	}

	// By verified email: no mapped group, the operator record decides.
	c3 := b.client()
	if r := b.ssoSignIn(c3, idp, map[string]any{"email": "bob@example.com", "email_verified": true}, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("email sign-in: %d %s", r.Status, r.Body)
	}
	if home := c3.get("/"); home.Status != http.StatusOK || !strings.Contains(home.Body, "bob@example.com") {
		t.Fatalf("after email sign-in: %d", home.Status)
	}
	var detail string
	b.db.Raw(`SELECT detail FROM audit_log WHERE action = 'login' AND actor = 'operator:bob@example.com'`).Scan(&detail)
	mustContain(t, "audit of email sign-in", detail, `"mapping":"email"`, `"via":"sso"`)
	b.db.Raw(`SELECT detail FROM audit_log WHERE action = 'login' AND actor = 'operator:ann@example.com' ORDER BY seq LIMIT 1`).Scan(&detail)
	mustContain(t, "audit of mapped sign-in", detail, `"mapping":"groups"`, `"idemops-finance"`, `"role":"operator"`)
	if n := b.auditCount("operator.add"); n != 2 { // bob by the test, ann by sso
		t.Fatalf("operator.add audited %d times, want 2", n)
	}
}

func TestSSORefusals(t *testing.T) {
	idp := newTestIdP(t)
	b := ssoBundle(t, idp)
	good := map[string]any{"email": "carol@example.com", "email_verified": true, "groups": []any{"idemops-admins"}}
	cases := []struct {
		name   string
		who    map[string]any
		tamper func(map[string]any)
		state  func(string) string
		reason string
	}{
		{"expired", good, func(m map[string]any) {
			m["exp"], m["iat"] = time.Now().Add(-time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix()
		}, nil, "expired"},
		{"wrong audience", good, func(m map[string]any) { m["aud"] = "another-client" }, nil, "audience"},
		{"wrong nonce", good, func(m map[string]any) { m["nonce"] = "not-the-nonce" }, nil, "nonce does not match"},
		{"wrong issuer", good, func(m map[string]any) { m["iss"] = "https://evil.example" }, nil, "another provider"},
		{"unverified email, mapped group", map[string]any{"email": "carol@example.com", "email_verified": false,
			"groups": []any{"idemops-admins"}}, nil, nil, "not verified"},
		{"no email_verified claim", map[string]any{"email": "carol@example.com", "groups": []any{"idemops-admins"}}, nil, nil, "not verified"},
		{"wrong state", good, nil, func(string) string { return "forged-state" }, "state does not match"},
		{"domain not allowed", map[string]any{"email": "mallory@evil.example", "email_verified": true,
			"groups": []any{"idemops-admins"}}, nil, nil, "not allowed"},
		{"unknown person", map[string]any{"email": "dave@example.com", "email_verified": true}, nil, nil, "no operator is named"},
	}
	for i, tc := range cases {
		c := b.client()
		r := b.ssoSignIn(c, idp, tc.who, tc.tamper, tc.state)
		if r.Status != http.StatusUnauthorized || !strings.Contains(r.Body, tc.reason) {
			t.Errorf("%s: %d, want 401 with %q: %s", tc.name, r.Status, tc.reason, r.Body)
		}
		for _, ck := range r.Header.Values("Set-Cookie") {
			if strings.HasPrefix(ck, sessionCookie+"=") {
				t.Errorf("%s: a session cookie was set: %s", tc.name, ck)
			}
		}
		if home := c.get("/"); home.Status != http.StatusSeeOther {
			t.Errorf("%s: / answered %d after a refused sign-in", tc.name, home.Status)
		}
		if n := b.auditCount("login.sso.refused"); n != int64(i+1) {
			t.Errorf("%s: %d refusals audited, want %d", tc.name, n, i+1)
		}
	}
	if n := b.auditCount("login"); n != 0 {
		t.Fatalf("%d sign-ins audited, want none", n)
	}
	if _, err := b.srv.ops.ByName(context.Background(), "carol@example.com"); err == nil {
		t.Fatal("a refused sign-in made an operator")
	}
	// A callback with no sign-in started here (no cookie) is refused too.
	if r := b.client().get("/login/sso/callback?code=x&state=y"); r.Status != http.StatusUnauthorized {
		t.Fatalf("callback without a started sign-in: %d", r.Status)
	}
}

func TestSSOLocalLoginOff(t *testing.T) {
	idp := newTestIdP(t)
	b := ssoBundle(t, idp, func(c *Config) { c.DisableLocalLogin = true })
	b.addOperator("erin@example.com", access.RoleAdmin, "*")
	c := b.client()
	page := c.get("/login")
	mustContain(t, "login page", page.Body, "Sign in with SSO")
	mustNotContain(t, "login page", page.Body, `name="password"`)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.Body)
	token := ""
	if m != nil {
		token = m[1]
	} else { // no form: take the pre-session token from its cookie
		u, _ := url.Parse(b.ts.URL)
		for _, ck := range c.http.Jar.Cookies(u) {
			if ck.Name == loginCookie {
				token = ck.Value
			}
		}
	}
	r := c.post("/login", url.Values{"csrf": {token}, "name": {"erin@example.com"}, "password": {"correct horse battery"}}, false)
	if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "turned off") {
		t.Fatalf("password sign-in with local login off: %d %s", r.Status, r.Body)
	}
	if home := c.get("/"); home.Status != http.StatusSeeOther {
		t.Fatalf("/ answered %d after a refused password sign-in", home.Status)
	}
	// SSO still works for the same person.
	if r := b.ssoSignIn(c, idp, map[string]any{"email": "erin@example.com", "email_verified": true}, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("sso with local login off: %d %s", r.Status, r.Body)
	}
	if _, err := New(Config{DB: b.srv.db, DisableLocalLogin: true}); err == nil {
		t.Fatal("local login off without SSO must be refused")
	}
}

func TestParseGroupMap(t *testing.T) {
	m, err := access.ParseGroupMap("a=admin:*; b=viewer:x,y")
	if err != nil || m["a"].Role != access.RoleAdmin || strings.Join(m["b"].Tenants, ",") != "x,y" {
		t.Fatalf("%+v %v", m, err)
	}
	for _, bad := range []string{"a", "a=boss:*", "a=viewer:", "=viewer:x", "a=viewer:x;a=admin:*"} {
		if _, err := access.ParseGroupMap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
