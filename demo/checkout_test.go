package demo_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func (e *env) post(path, body, apiKey string, headers ...string) reply {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.w.APIURL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := reply{status: res.StatusCode, header: res.Header}
	_ = json.Unmarshal(b, &r.body)
	return r
}

func (e *env) token(apiKey string) string {
	e.t.Helper()
	r := e.post("/v1/checkout/tokens", "", apiKey)
	tok, _ := r.body["token"].(string)
	if r.status != 201 || !strings.HasPrefix(tok, "tok_") {
		e.t.Fatalf("issue token: %d %v", r.status, r.body)
	}
	return tok
}

func TestCheckout_OneTimeTokenIsTheKey(t *testing.T) {
	e := start(t, paysim.Config{Seed: 31})
	tok := e.token(e.key)
	first := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, tok)
	if first.status != 201 {
		t.Fatalf("checkout with a token: %d %v", first.status, first.body)
	}
	again := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, tok)
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || again.body["payment_id"] != first.body["payment_id"] {
		t.Fatalf("reused token: %d %v, want the first answer replayed", again.status, again.body)
	}
	other := strings.Replace(body, "1234", "999", 1)
	if r := e.post("/v1/checkout", other, e.key, httpidem.HeaderToken, tok); r.status != 422 {
		t.Fatalf("reused token, another body: %d, want 422 like a reused key", r.status)
	}
	if n := e.w.Paysim.ChargeCount(e.orderNo(first.body["payment_id"].(string))); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}

	problem := func(r reply) string { s, _ := r.body["type"].(string); return s }
	if r := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, "tok_never-issued"); r.status != 400 || problem(r) != "/problems/token-unknown" {
		t.Fatalf("unknown token: %d %v", r.status, r.body)
	}
	globex := e.token(e.w.APIKey("globex"))
	if r := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, globex); r.status != 400 || problem(r) != "/problems/token-unknown" {
		t.Fatalf("another tenant's token: %d %v", r.status, r.body)
	}
	stale := e.token(e.key)
	pgtest.Exec(t, e.w.Orders.DB, `UPDATE one_time_tokens SET expires_at = now() - interval '1 second' WHERE used_at IS NULL`)
	if r := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, stale); r.status != 400 || problem(r) != "/problems/token-expired" {
		t.Fatalf("expired token: %d %v", r.status, r.body)
	}
	if r := e.post("/v1/checkout", body, e.key, httpidem.HeaderToken, e.token(e.key), "Idempotency-Key", "k-1"); r.status != 400 {
		t.Fatalf("token and key together: %d, want 400", r.status)
	}
	// Only hashes are stored: neither the tokens table nor the keys table holds a raw token.
	var n int64
	e.w.Orders.DB.Raw(`SELECT (SELECT count(*) FROM one_time_tokens WHERE token_hash LIKE 'tok_%')
		+ (SELECT count(*) FROM idempotency_keys WHERE key LIKE '%' || ? || '%')`, strings.TrimPrefix(tok, "tok_")).Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows hold a raw token", n)
	}
}
