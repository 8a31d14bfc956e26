package demo_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim/idemclient"
	"github.com/idemops/idemops/downstream/paysim"
)

// Every error of the payments API is application/problem+json, each case with its own type.
func TestPayments_EveryErrorIsAProblemWithItsOwnType(t *testing.T) {
	e := start(t, paysim.Config{Seed: 8, DeclinePayees: []string{"mallory"}})
	e.pay("prob-1", body)
	call := func(method, path, apiKey, key, reqBody string) (int, string, string) {
		req, _ := http.NewRequest(method, e.w.APIURL+path, strings.NewReader(reqBody))
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), string(b)
	}
	cases := []struct {
		name, method, path, apiKey, key, body string
		status                                int
		typ                                   string
	}{
		{"no credential", "POST", "/v1/payments", "", "k", body, 401, "unauthenticated"},
		{"no key", "POST", "/v1/payments", e.key, "", body, 400, "key-missing"},
		{"key too long", "POST", "/v1/payments", e.key, strings.Repeat("k", 256), body, 400, "key-malformed"},
		{"invalid amount", "POST", "/v1/payments", e.key, "prob-2", strings.Replace(body, "1234", "0", 1), 400, "invalid-field"},
		{"amount out of range", "POST", "/v1/payments", e.key, "prob-5", strings.Replace(body, "1234", "9223372036854775807", 1), 400, "invalid-field"},
		{"amount past int64", "POST", "/v1/payments", e.key, "prob-6", strings.Replace(body, "1234", "9223372036854775808", 1), 400, "invalid-field"},
		{"body too large", "POST", "/v1/payments", e.key, "prob-3", `{"x":"` + strings.Repeat("a", 17<<10) + `"}`, 413, "body-too-large"},
		{"key reused", "POST", "/v1/payments", e.key, "prob-1", strings.Replace(body, "1234", "999", 1), 422, "key-reused"},
		{"declined", "POST", "/v1/payments", e.key, "prob-4", strings.Replace(body, `"alice"`, `"mallory"`, 1), 402, "payment-declined"},
		{"payment of nobody", "GET", "/v1/payments/pay_nope", e.key, "", "", 404, "payment-not-found"},
		{"payment without credential", "GET", "/v1/payments/pay_nope", "", "", "", 401, "unauthenticated"},
		{"status of an unknown key", "GET", "/idempotency/status?operation=payment.charge", e.key, "nope", "", 404, "key-not-found"},
		{"no such route", "GET", "/v2/nothing", e.key, "", "", 404, "not-found"},
		{"no such problem type", "GET", "/problems/nothing", "", "", "", 404, "not-found"},
	}
	for _, c := range cases {
		status, ct, got := call(c.method, c.path, c.apiKey, c.key, c.body)
		if status != c.status || ct != "application/problem+json" || !strings.Contains(got, `"type":"/problems/`+c.typ+`"`) {
			t.Errorf("%s: %d %s %s; want %d %s", c.name, status, ct, got, c.status, c.typ)
		}
		if status, _, doc := call("GET", "/problems/"+c.typ, "", "", ""); status != 200 || !strings.HasPrefix(doc, c.typ) {
			t.Errorf("%s: no documentation for /problems/%s: %d", c.name, c.typ, status)
		}
	}
}

// The demo mounts the status lookup and the published key policy, and its traffic generator's
// client (idemclient.Transport) surfaces the replay marker.
func TestPayments_StatusPolicyAndClient(t *testing.T) {
	e := start(t, paysim.Config{Seed: 9})
	hc := &http.Client{Transport: &idemclient.Transport{MaxAttempts: 3, BaseDelay: 1e6, MaxDelay: 1e7}}
	send := func() *http.Response {
		req, _ := http.NewRequest("POST", e.w.APIURL+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("Idempotency-Key", "client-1")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if first, again := send(), send(); first.StatusCode != 201 || idemclient.Replayed(first) || again.StatusCode != 201 || !idemclient.Replayed(again) {
		t.Fatalf("first %d/%v, again %d/%v", first.StatusCode, idemclient.Replayed(first), again.StatusCode, idemclient.Replayed(again))
	}
	req, _ := http.NewRequest("GET", e.w.APIURL+"/idempotency/status?operation=payment.charge", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Idempotency-Key", "client-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"state":"completed"`) || !strings.Contains(string(b), `"status":201`) {
		t.Fatalf("status: %d %s", res.StatusCode, b)
	}
	res, err = http.Get(e.w.APIURL + "/idempotency/policy")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"operation":"payment.charge"`) || !strings.Contains(string(b), `"keep_key_seconds"`) {
		t.Fatalf("policy: %d %s", res.StatusCode, b)
	}
}
