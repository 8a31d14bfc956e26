package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestFindByKey: the header's find box and POST /api/v1/keys/find look a raw key up in every
// tenant and operation the operator may see, and nowhere else; the key never reaches a URL.
func TestFindByKey(t *testing.T) {
	b := setup(t)
	b.addOperator("all", access.RoleViewer, access.AllTenants)
	b.addOperator("acme-v", access.RoleViewer, "acme")
	a := b.seedKey("acme", "payment.charge", "ORDER-7781", `{"amount":100,"currency":"USD"}`, true)
	g := b.seedKey("globex", "order.create", "ORDER-7781", `{"amount":200,"currency":"EUR"}`, false)
	secret := b.seedKey("globex", "payment.charge", "GLOBEX-only-9", `{"amount":300,"currency":"EUR"}`, true)
	b.seedKey("acme", "payment.charge", "ORDER-7781-other", `{"amount":1,"currency":"USD"}`, true)
	href := func(id int64) string { return fmt.Sprintf(`href="/keys/%d"`, id) }

	// The box is in the header of every signed-in page, a POST form with the CSRF field.
	all := b.signIn("all")
	for _, p := range []string{"/", "/keys", "/jobs", "/reconcile", "/retention", fmt.Sprintf("/keys/%d", a.ID)} {
		body := all.get(p).Body
		head, _, _ := strings.Cut(body, "<main>")
		mustContain(t, p+" header", head, `<form method="post" action="/keys/find" class="find"`, `name="csrf" value="`, `name="key"`)
	}

	// A "*" viewer: the key exists in two tenants → a chooser with both, nothing else.
	got := all.post("/keys/find", url.Values{"key": {"ORDER-7781"}}, true)
	if got.Status != 200 {
		t.Fatalf("find in two tenants: status %d, want 200 (a chooser)", got.Status)
	}
	mustContain(t, "chooser", got.Body, href(a.ID), href(g.ID), "acme", "globex", "payment.charge", "order.create")
	mustNotContain(t, "chooser", got.Body, "ORDER-7781-other", href(secret.ID))

	// A tenant viewer: only the own tenant's key → opened directly, by id.
	acme := b.signIn("acme-v")
	got = acme.post("/keys/find", url.Values{"key": {"ORDER-7781"}}, true)
	if got.Status != 303 || got.Location != fmt.Sprintf("/keys/%d", a.ID) {
		t.Fatalf("find as acme viewer: %d → %q, want 303 → /keys/%d", got.Status, got.Location, a.ID)
	}
	// Another tenant's key answers like a missing one: the empty state, no link.
	other := acme.post("/keys/find", url.Values{"key": {"GLOBEX-only-9"}}, true)
	missing := acme.post("/keys/find", url.Values{"key": {"NO-SUCH-KEY-1"}}, true)
	if other.Status != 200 || missing.Status != 200 {
		t.Fatalf("not found: statuses %d and %d, want 200 (empty state)", other.Status, missing.Status)
	}
	mustContain(t, "other tenant's key", other.Body, "No key you may see is exactly")
	mustNotContain(t, "other tenant's key", other.Body, href(secret.ID), "globex")
	if strings.ReplaceAll(other.Body, "GLOBEX-only-9", "K") != strings.ReplaceAll(missing.Body, "NO-SUCH-KEY-1", "K") {
		t.Error("another tenant's key does not answer exactly like a missing key")
	}
	// Bad input is a 400 naming the field, never a 500.
	for _, bad := range []string{"", "a\x00b", strings.Repeat("k", 256), "caf\xc3\xa9"} {
		if got := acme.post("/keys/find", url.Values{"key": {bad}}, true); got.Status != 400 || !strings.Contains(got.Body, "key") {
			t.Errorf("find %q: status %d, want 400 naming the key", bad, got.Status)
		}
	}

	// The API: the same scope, the shape of GET /api/v1/keys.
	tokAll, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "all", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	tokAcme, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "acme-v", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	find := func(tok string, body any) (int, []KeySummary, map[string]json.RawMessage) {
		t.Helper()
		got := all.apiPost("/api/v1/keys/find", tok, body)
		var out struct {
			Keys []KeySummary `json:"keys"`
		}
		var raw map[string]json.RawMessage
		if got.Status == 200 {
			if err := json.Unmarshal([]byte(got.Body), &out); err != nil {
				t.Fatalf("find: %v in %s", err, got.Body)
			}
			_ = json.Unmarshal([]byte(got.Body), &raw)
		}
		return got.Status, out.Keys, raw
	}
	status, keys, raw := find(tokAll, map[string]string{"key": "ORDER-7781"})
	if status != 200 || len(keys) != 2 || keys[0].ID != a.ID || keys[1].ID != g.ID {
		t.Fatalf("api find as *: %d %+v, want acme's then globex's key", status, keys)
	}
	if keys[0].Tenant != "acme" || keys[0].Operation != "payment.charge" || keys[0].Key != "ORDER-7781" ||
		keys[0].KeyDigest != a.KeyDigest || keys[0].State != a.State {
		t.Errorf("api find row %+v does not describe key %d", keys[0], a.ID)
	}
	if string(raw["next_cursor"]) != "null" {
		t.Errorf("api find: next_cursor %s, want null (the shape of GET /api/v1/keys)", raw["next_cursor"])
	}
	// The same fields as a search row.
	search := all.api("/api/v1/keys?digest="+a.KeyDigest, tokAll)
	var sr struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	var fr struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	_ = json.Unmarshal([]byte(search.Body), &sr)
	_ = json.Unmarshal([]byte(all.apiPost("/api/v1/keys/find", tokAll, map[string]string{"key": "ORDER-7781"}).Body), &fr)
	if len(sr.Keys) != 1 || len(fr.Keys) != 2 || len(sr.Keys[0]) != len(fr.Keys[0]) {
		t.Fatalf("search and find rows differ in shape: %v vs %v", sr.Keys, fr.Keys)
	}
	for f := range sr.Keys[0] {
		if _, ok := fr.Keys[0][f]; !ok {
			t.Errorf("find row lacks the search field %q", f)
		}
	}
	if status, keys, _ := find(tokAcme, map[string]string{"key": "ORDER-7781"}); status != 200 || len(keys) != 1 || keys[0].ID != a.ID {
		t.Errorf("api find as acme viewer: %d %+v, want acme's key only", status, keys)
	}
	if status, keys, raw := find(tokAcme, map[string]string{"key": "GLOBEX-only-9"}); status != 200 || len(keys) != 0 || string(raw["keys"]) != "[]" {
		t.Errorf("api find of another tenant's key: %d %+v %s, want 200 with []", status, keys, raw["keys"])
	}
	for _, bad := range []any{map[string]string{"key": ""}, map[string]string{"key": "a\x00b"}, map[string]string{"tenant": "acme"},
		map[string]any{"key": 42}, "not an object", map[string]string{"key": strings.Repeat("k", 2<<20)}} {
		if status, _, _ := find(tokAcme, bad); status < 400 || status >= 500 {
			t.Errorf("api find %.40v: status %d, want 4xx", bad, status)
		}
	}
}
