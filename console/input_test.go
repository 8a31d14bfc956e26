package console

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// rawReq sends a request with a body exactly as given (no re-encoding), as c.
func (c *client) rawReq(method, path, contentType, token string, body []byte) resp {
	req, _ := http.NewRequest(method, c.b.ts.URL+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return c.do(req)
}

// TestHostileInput_Is400NamingTheField: a NUL byte or bytes that are not UTF-8 in a query
// parameter, a form field (urlencoded or multipart) or a JSON string answer 400 with the field's
// name — on pages, the API and the sign-in form — never reaching the database; in a path
// parameter, 404 like any missing object.
func TestHostileInput_Is400NamingTheField(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root := b.signIn("root")
	tok := b.token("root")
	form := "application/x-www-form-urlencoded"
	withCSRF := func(v url.Values) []byte { v.Set("csrf", root.csrf); return []byte(v.Encode()) }
	mp, mpType := multipartBody(map[string]string{"channel": "str\x00ipe", "format": "stripe", "csrf": root.csrf}, []byte("x"))
	for _, tc := range []struct {
		name                      string
		method, path, ctype, auth string
		body                      []byte
		want                      string
	}{
		{"page query NUL", "GET", "/keys?tenant=ac%00me", "", "", nil, "tenant: contains a NUL byte"},
		{"page query not UTF-8", "GET", "/keys?operation=%ff%fe", "", "", nil, "operation: is not valid UTF-8"},
		{"JSON in a query value", "GET", "/keys?field=payee&value=%22a%5Cu0000%22", "", "", nil, "value: contains a NUL byte"},
		{"page query name", "GET", "/audit?act%00or=x", "", "", nil, `"act\x00or": its name contains a NUL byte`},
		{"findings filter", "GET", "/reconcile/findings?channel=%c3%28", "", "", nil, "channel: is not valid UTF-8"},
		{"page form", "POST", "/keys/find", form, "", withCSRF(url.Values{"key": {"k\x00"}}), "key: contains a NUL byte"},
		{"admin form", "POST", "/admin/operators", form, "", withCSRF(url.Values{"name": {"bad\xffname"}, "password": {"a long enough password"},
			"role": {"viewer"}, "tenants": {"acme"}}), "name: is not valid UTF-8"},
		{"multipart form field", "POST", "/reconcile/upload", mpType, "", mp.Bytes(), "channel: contains a NUL byte"},
		{"sign-in form", "POST", "/login", form, "", []byte("name=ro%00ot&password=x"), "name: contains a NUL byte"},
		{"API query", "GET", "/api/v1/keys?state=%00", "", tok, nil, "state: contains a NUL byte"},
		{"API JSON NUL", "POST", "/api/v1/keys/find", "application/json", tok, []byte(`{"key":"k\u0000"}`), "key: contains a NUL byte"},
		{"API JSON not UTF-8", "POST", "/api/v1/reconcile/jobs", "application/json", tok,
			[]byte("{\"name\":\"n\xc3\x28\",\"channel\":\"stripe\"}"), "name: is not valid UTF-8"},
		{"API JSON sent as text", "POST", "/api/v1/keys/find", "text/plain", tok, []byte(`{"key":"\ud800"}`), "key: is not valid UTF-8"},
	} {
		got := root.rawReq(tc.method, tc.path, tc.ctype, tc.auth, tc.body)
		body := strings.ReplaceAll(got.Body, "&#34;", `"`)
		if got.Status != 400 || !strings.Contains(body, tc.want) && !strings.Contains(body, strings.ReplaceAll(tc.want, `\`, `\\`)) {
			t.Errorf("%s: %d %.300s; want 400 with %q", tc.name, got.Status, got.Body, tc.want)
		}
	}
	if n := b.count(`SELECT count(*) FROM operators WHERE name LIKE 'bad%'`); n != 0 {
		t.Errorf("%d operators written from a refused form", n)
	}
	// A path parameter names an object; no object has such a name.
	for path, auth := range map[string]string{"/reconcile/jobs/a%00b": "", "/keys/%ff": "", "/api/v1/keys/%ff": tok, "/static/%00": ""} {
		if got := root.rawReq("GET", path, "", auth, nil); got.Status != 404 {
			t.Errorf("GET %s: %d, want 404", path, got.Status)
		}
	}
}

// TestBodyLimits_413: every body-limited endpoint answers 413 past its limit — forms (before
// the CSRF check could read an empty token), the sign-in form, JSON and uploads.
func TestBodyLimits_413(t *testing.T) {
	b := setup(t, func(cfg *Config) { cfg.UploadLimit = 1 << 10 })
	b.addOperator("root", access.RoleAdmin, "*")
	root := b.signIn("root")
	tok := b.token("root")
	big := strings.Repeat("x", maxBody+1)
	file := bytes.Repeat([]byte("x"), 200<<10)
	mp, mpType := multipartBody(map[string]string{"channel": "stripe", "format": "stripe", "csrf": root.csrf}, file)
	for _, tc := range []struct {
		name, path, ctype, auth string
		body                    []byte
	}{
		{"page form", "/admin/operators", "application/x-www-form-urlencoded", "", []byte("csrf=" + root.csrf + "&name=" + big)},
		{"sign-in form", "/login", "application/x-www-form-urlencoded", "", []byte("name=" + big)},
		{"API JSON", "/api/v1/keys/find", "application/json", tok, []byte(`{"key":"` + big + `"}`)},
		{"page upload", "/reconcile/upload", mpType, "", mp.Bytes()},
	} {
		if got := root.rawReq("POST", tc.path, tc.ctype, tc.auth, tc.body); got.Status != 413 {
			t.Errorf("%s: %d %.200s; want 413", tc.name, got.Status, got.Body)
		}
	}
}
