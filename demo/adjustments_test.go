package demo_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemops/idemops/downstream/paysim"
)

func (e *env) adjustment(key, body string) reply {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.w.APIURL+"/v1/balance/adjustments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Idempotency-Key", key)
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

// TestAdjustments_OneCommitPath: the demo's local-only operation runs claim, rows and completion
// in one transaction — racing duplicates give one adjustment and one balance move (the others
// wait on the unique index and replay, never 409); a debit beyond the balance is a recorded,
// replayed 409; an invalid body stores nothing and the corrected one executes.
func TestAdjustments_OneCommitPath(t *testing.T) {
	e := start(t, paysim.Config{Seed: 3})
	const credit = `{"amount_minor": 5000, "currency": "CNY", "reason": "goodwill"}`
	var wg sync.WaitGroup
	statuses := make(chan reply, 20)
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); statuses <- e.adjustment("adj-1", credit) }()
	}
	wg.Wait()
	close(statuses)
	created, replayed := 0, 0
	for r := range statuses {
		switch {
		case r.status == 201 && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
		case r.status == 201:
			created++
		default:
			t.Fatalf("a racing duplicate answered %d %v", r.status, r.body)
		}
	}
	if created != 1 || replayed != 19 {
		t.Errorf("%d created, %d replayed; want 1 and 19", created, replayed)
	}
	var rows, balance int64
	db := e.store.DB()
	db.Raw(`SELECT count(*) FROM demo_balance_adjustments`).Scan(&rows)
	db.Raw(`SELECT balance_minor FROM demo_balances WHERE id = 'acme|CNY'`).Scan(&balance)
	if rows != 1 || balance != 5000 {
		t.Fatalf("%d adjustment rows, balance %d; want 1 and 5000", rows, balance)
	}

	debit := `{"amount_minor": -9000, "currency": "CNY", "reason": "chargeback"}`
	if r := e.adjustment("adj-2", debit); r.status != 409 || r.body["type"] != "/problems/insufficient-balance" {
		t.Fatalf("overdraft: %d %v", r.status, r.body)
	}
	if r := e.adjustment("adj-2", debit); r.status != 409 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("overdraft retry: %d %v, want the refusal replayed", r.status, r.header)
	}
	if r := e.adjustment("adj-3", `{"amount_minor": 0, "currency": "CNY", "reason": "x"}`); r.status != 400 || r.body["field"] != "amount_minor" {
		t.Fatalf("zero amount: %d %v", r.status, r.body)
	}
	if r := e.adjustment("adj-3", `{"amount_minor": -1000, "currency": "CNY", "reason": "fee"}`); r.status != 201 || r.body["balance_minor"] != float64(4000) {
		t.Fatalf("corrected body under the refused key: %d %v", r.status, r.body)
	}
	db.Raw(`SELECT balance_minor FROM demo_balances WHERE id = 'acme|CNY'`).Scan(&balance)
	if balance != 4000 {
		t.Errorf("balance %d, want 4000", balance)
	}
}
