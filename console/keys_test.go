package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
)

func TestSearch_FiltersAndKeysetPages(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	for i := 0; i < 7; i++ {
		cur := "USD"
		if i%2 == 0 {
			cur = "EUR"
		}
		b.seedKey("acme", "payment.charge", fmt.Sprintf("key-%d", i), fmt.Sprintf(`{"amount":%d,"currency":%q,"customer":{"id":"c%d"}}`, 100+i, cur, i%3), i < 5)
	}
	// Spread created_at so that two keys share one timestamp: keyset paging must not lose either.
	b.exec(`UPDATE idempotency_keys SET created_at = now() - (id % 6) * interval '1 minute'`)
	b.exec(`UPDATE idempotency_keys SET needs_attention = true WHERE key = 'key-6'`)
	ctx := context.Background()
	op := &access.Operator{Tenants: []string{access.AllTenants}}

	// Pages of 2 through the keyset visit every key once, newest first.
	var seen []int64
	f := KeyFilter{Limit: 2}
	for page := 0; page < 10; page++ {
		rows, next, err := SearchKeys(ctx, b.db, op, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			seen = append(seen, r.ID)
		}
		if next == nil {
			break
		}
		// The cursor survives its URL form.
		if f.After, err = ParseCursor(next.String()); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 7 {
		t.Fatalf("paging saw %d keys (%v), want 7 each once", len(seen), seen)
	}
	uniq := map[int64]bool{}
	for _, id := range seen {
		uniq[id] = true
	}
	if len(uniq) != 7 {
		t.Errorf("paging repeated keys: %v", seen)
	}

	count := func(q string) int {
		t.Helper()
		vals, _ := url.ParseQuery(q)
		f, err := ParseKeyFilter(vals)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		rows, _, err := SearchKeys(ctx, b.db, op, f)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return len(rows)
	}
	for q, want := range map[string]int{
		"state=completed":                      5,
		"state=processing":                     2,
		"field=currency&value=EUR":             4,
		"field=amount&value=103":               1,
		"field=customer.id&value=c1":           2,
		"operation=payment.charge&tenant=acme": 7,
		"tenant=globex":                        0,
		"from=" + time.Now().Add(-90*time.Second).UTC().Format(time.RFC3339): 3, // ids 6, 1 and 7
	} {
		if got := count(q); got != want {
			t.Errorf("%s: %d keys, want %d", q, got, want)
		}
	}
	for _, bad := range []string{"state=done", "digest=xyz", "from=yesterday", "after=nope", "attention=yes", "field=a%20b", "value=x", "limit=1000"} {
		vals, _ := url.ParseQuery(bad)
		if _, err := ParseKeyFilter(vals); !isFieldError(err) {
			t.Errorf("%s: err %v, want an invalid-input error", bad, err)
		}
	}

	// The page: a bad filter says which field; pagination links carry the filter.
	c := b.signIn("v")
	if got := c.get("/keys?state=done"); got.Status != 400 || !strings.Contains(got.Body, "state: ") {
		t.Errorf("bad filter page: %d", got.Status)
	}
	got := c.get("/keys?state=completed&limit=2")
	if !strings.Contains(got.Body, "/keys?after=") || !strings.Contains(got.Body, "state=completed") {
		t.Errorf("next-page link lacks the cursor or the filter")
	}
	if strings.Contains(strings.ToLower(got.Body), "count(") {
		t.Error("search page mentions a count")
	}
}

func TestSearch_ExactKeyIsHashedOnTheServer(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "acme")
	k := b.seedKey("acme", "payment.charge", "order-secret-42", `{"amount":1,"currency":"USD"}`, true)
	b.seedKey("acme", "payment.charge", "order-other", `{"amount":2,"currency":"USD"}`, true)
	c := b.signIn("v")
	got := c.post("/keys/find", url.Values{"tenant": {"acme"}, "operation": {"payment.charge"}, "key": {"order-secret-42"}}, true)
	if got.Status != 303 || strings.Contains(got.Location, "order-secret-42") || !strings.Contains(got.Location, k.KeyDigest) {
		t.Fatalf("find: %d → %q (want a redirect by digest, without the key)", got.Status, got.Location)
	}
	page := c.get(got.Location)
	if !strings.Contains(page.Body, fmt.Sprintf(`href="/keys/%d"`, k.ID)) || strings.Contains(page.Body, "order-other") {
		t.Error("search by digest does not find exactly the key")
	}
	if got := c.post("/keys/find", url.Values{"tenant": {"acme"}, "key": {"x"}}, true); got.Status != 400 {
		t.Errorf("find without operation: %d, want 400", got.Status)
	}
}

func TestKeyDetail_RedactedRevealAudited(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "acme")
	b.addOperator("o", access.RoleOperator, "acme")
	k := b.seedKey("acme", "payment.charge", "k-reveal", `{"amount":4200,"currency":"USD","card":"4111-SECRET"}`, true)
	path := fmt.Sprintf("/keys/%d", k.ID)

	viewer := b.signIn("v")
	page := viewer.get(path)
	mustContain(t, "detail", page.Body, k.KeyDigest, k.Fingerprint, k.DownstreamKey, "Redacted", "claimed", "completed")
	mustNotContain(t, "viewer detail", page.Body, "4111-SECRET", "RESPONSE-k-reveal", `id="reveal"`)
	if got := viewer.post(path+"/reveal", nil, true); got.Status != 403 {
		t.Errorf("viewer reveal: %d, want 403", got.Status)
	}

	op := b.signIn("o")
	page = op.get(path)
	mustContain(t, "operator detail", page.Body, `id="reveal"`)
	mustNotContain(t, "operator detail before reveal", page.Body, "4111-SECRET")
	got := op.post(path+"/reveal", nil, true)
	if got.Status != 200 {
		t.Fatalf("reveal: %d", got.Status)
	}
	mustContain(t, "revealed", got.Body, "4111-SECRET", "RESPONSE-k-reveal")

	var rows []audit.Row
	b.db.Raw(`SELECT actor, array_to_json(tenants)::text AS tenants, detail FROM audit_log WHERE action = 'key.reveal'`).Scan(&rows)
	if len(rows) != 1 || rows[0].Actor != "operator:o" || !slices.Equal(rows[0].Tenants, audit.TenantSet{"acme"}) || !strings.Contains(rows[0].Detail, k.KeyDigest) {
		t.Fatalf("audit rows for the reveal: %+v", rows)
	}
	if strings.Contains(rows[0].Detail, "k-reveal") || strings.Contains(rows[0].Detail, "4111") {
		t.Error("the audit row holds the raw key or body")
	}
	evs, _ := b.claims.History(context.Background(), k.ID, 0)
	if last := evs[len(evs)-1]; last.Kind != "revealed" || last.Actor != "operator:o" {
		t.Errorf("last key event %+v, want revealed by operator:o", last)
	}
}

func TestCheckDownstream_RecordsTheAnswer(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "acme")
	k := b.seedKey("acme", "payment.charge", "k-check", `{"amount":1,"currency":"USD"}`, false)
	c := b.signIn("o")
	path := fmt.Sprintf("/keys/%d/check", k.ID)

	got := c.post(path, nil, true)
	mustContain(t, "not found", got.Body, "no document")
	b.fakeOp.found[k.DownstreamKey] = "ch_777"
	got = c.post(path, nil, true)
	mustContain(t, "found", got.Body, "resource ch_777")
	b.fakeOp.err = errors.New("channel timeout")
	got = c.post(path, nil, true)
	mustContain(t, "error", got.Body, "channel timeout")

	evs, _ := b.claims.History(context.Background(), k.ID, 0)
	var checks []map[string]any
	for _, e := range evs {
		if e.Kind == "downstream_checked" {
			var d map[string]any
			_ = json.Unmarshal(e.Detail, &d)
			checks = append(checks, d)
		}
	}
	if len(checks) != 3 || checks[0]["found"] != false || checks[1]["summary"] != "resource ch_777" || checks[2]["error"] != "channel timeout" {
		t.Errorf("check events %v", checks)
	}
	// The check is read-only: the key is still processing, untouched.
	after, _ := b.claims.Get(context.Background(), k.ID)
	if after.State != k.State || after.Version != k.Version {
		t.Errorf("key changed by a check: %s v%d → %s v%d", k.State, k.Version, after.State, after.Version)
	}
}
