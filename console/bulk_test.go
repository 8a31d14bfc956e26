package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
)

// TestBulkReplay_TamperedOrStaleConfirmationRefused: a start whose plan was altered (a refused
// key turned into a sent one, a key added), whose token was altered, or whose preview expired is
// a 400 naming the field, and nothing is written.
func TestBulkReplay_TamperedOrStaleConfirmationRefused(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	lost := b.seedFailed("acme", "t-lost", `{"amount":200,"currency":"USD"}`, true)
	done := b.seedKey("acme", "payment.charge", "t-done", `{"amount":400,"currency":"USD"}`, true)
	other := b.seedFailed("globex", "t-other", `{"amount":1,"currency":"USD"}`, true)
	c := b.signIn("olga")
	page := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"all"}}, true)
	if page.Status != 200 {
		t.Fatalf("preview: %d %s", page.Status, truncate(page.Body, 300))
	}
	form := bulkStartForm(t, page.Body)
	plan, token := form.Get("plan"), form.Get("token")
	if !strings.Contains(plan, fmt.Sprintf("%d.%d.completed.refused", done.ID, done.Version)) {
		t.Fatalf("plan %q does not fix the completed key as refused", plan)
	}
	before := b.bulkRows()
	// An expired preview of the same keys, properly signed.
	parts := strings.SplitN(plan, "|", 3)
	stale := parts[0] + "|" + strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10) + "|" + parts[2]
	for name, tc := range map[string]struct{ plan, token, want string }{
		"refused turned into send":    {strings.Replace(plan, "completed.refused", "completed.send", 1), token, "token"},
		"key of another tenant added": {plan + fmt.Sprintf("-%d.%d.failed_retryable.send", other.ID, other.Version), token, "token"},
		"token altered":               {plan, strings.Repeat("0", len(token)), "token"},
		"no token":                    {plan, "", "token"},
		"expired":                     {stale, bulkMAC(b.ops["olga"].ID, stale), "expired"},
	} {
		got := c.post("/replays/bulk/start", url.Values{"plan": {tc.plan}, "token": {tc.token}, "reason": {"x"}}, true)
		if got.Status != 400 || !strings.Contains(got.Body, tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", name, got.Status, truncate(got.Body, 200), tc.want)
		}
	}
	if after := b.bulkRows(); after != before {
		t.Errorf("refused starts wrote rows: %v → %v", before, after)
	}
	if b.key(lost.ID).Version != lost.Version || b.fakeOp.executes.Load() != 0 {
		t.Error("a refused start touched a key")
	}
}

// TestBulkReplay_SelectedKeysPreviewAndStart: the keys ticked on the search page are previewed
// (and only those visible to the operator), writing nothing; the start replays exactly them.
func TestBulkReplay_SelectedKeysPreviewAndStart(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	k1 := b.seedFailed("acme", "s-one", `{"amount":100,"currency":"USD"}`, true)
	k2 := b.seedFailed("acme", "s-two", `{"amount":200,"currency":"USD"}`, true)
	k3 := b.seedFailed("acme", "s-three", `{"amount":300,"currency":"USD"}`, true)
	other := b.seedFailed("globex", "s-other", `{"amount":1,"currency":"USD"}`, true)
	c := b.signIn("olga")
	mustContain(t, "search page", c.get("/keys?tenant=acme").Body, `name="id" value="`+fmt.Sprint(k2.ID)+`" form="bulk-select"`,
		`id="preview-selected"`, `id="select-all-matching"`, "Select all 3 keys matching this filter", `src="/static/bulk.js"`)
	if got := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"selected"}}, true); got.Status != 400 || !strings.Contains(got.Body, "no key selected") {
		t.Errorf("preview of no selected key: %d %s", got.Status, truncate(got.Body, 200))
	}
	if got := c.post("/replays/bulk", url.Values{"scope": {"selected"}, "id": {"12x"}}, true); got.Status != 400 {
		t.Errorf("preview of a bad id: %d", got.Status)
	}
	before := b.bulkRows()
	ids := []string{fmt.Sprint(k1.ID), fmt.Sprint(k3.ID), fmt.Sprint(other.ID)}
	page := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"selected"}, "id": ids}, true)
	if page.Status != 200 {
		t.Fatalf("selected preview: %d %s", page.Status, truncate(page.Body, 300))
	}
	mustContain(t, "selected preview", page.Body, "2 keys picked", `href="/keys/`+fmt.Sprint(k1.ID)+`"`, `href="/keys/`+fmt.Sprint(k3.ID)+`"`, "Yes, replay 2 keys")
	mustNotContain(t, "selected preview", page.Body, `href="/keys/`+fmt.Sprint(k2.ID)+`"`, `href="/keys/`+fmt.Sprint(other.ID)+`"`)
	if after := b.bulkRows(); after != before {
		t.Fatalf("the preview wrote rows: %v → %v", before, after)
	}
	form := bulkStartForm(t, page.Body)
	form.Set("reason", "two keys the customer named")
	got := c.post("/replays/bulk/start", form, true)
	if got.Status != 303 {
		t.Fatalf("start: %d %s", got.Status, truncate(got.Body, 300))
	}
	var id int64
	fmt.Sscanf(got.Location, "/replays/bulk/%d", &id)
	b.waitBulk(id)
	if n := b.count(`SELECT count(*) FROM replay_bulk_items WHERE run_id = ? AND key_id IN (?, ?) AND result IS NOT NULL`, id, k1.ID, k3.ID); n != 2 {
		t.Errorf("replayed items of the selection: %d, want 2", n)
	}
	if n := b.count(`SELECT count(*) FROM replay_bulk_items WHERE run_id = ?`, id); n != 2 {
		t.Errorf("items of the run: %d, want 2", n)
	}
	// Both keys were not found yet: parked, the run waits for their re-check.
	mustContain(t, "run page", c.get(got.Location).Body, "2 of 2", `id="bulk-waiting"`, "2 parked: downstream said not found once")
}

// TestBulkReplay_SelectAllMatchingTakesTheFilter: "select all N matching this filter" says how
// many match (capped at BulkCap, and says so); choosing it previews the whole filter — not just
// the ticked keys of the page — up to the cap.
func TestBulkReplay_SelectAllMatchingTakesTheFilter(t *testing.T) {
	b := setup(t, func(c *Config) { c.BulkCap = 3 })
	b.addOperator("olga", access.RoleOperator, "acme")
	var first int64
	for i := range 5 {
		k := b.seedFailed("acme", fmt.Sprintf("m-%d", i), `{"amount":100,"currency":"USD"}`, true)
		if i == 0 {
			first = k.ID
		}
	}
	b.seedFailed("globex", "m-other", `{"amount":1,"currency":"USD"}`, true)
	c := b.signIn("olga")
	mustContain(t, "search page", c.get("/keys?tenant=acme").Body, "Select all the newest 3 of more than 3 keys matching this filter",
		"a bulk replay takes at most 3")
	before := b.bulkRows()
	page := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"all"}, "id": {fmt.Sprint(first)}}, true)
	if page.Status != 200 {
		t.Fatalf("all-matching preview: %d %s", page.Status, truncate(page.Body, 300))
	}
	mustContain(t, "all-matching preview", page.Body, `id="bulk-capped"`, "covers the newest 3", "Yes, replay 3 keys", "tenant=acme")
	if after := b.bulkRows(); after != before {
		t.Fatalf("the preview wrote rows: %v → %v", before, after)
	}
	small := c.get("/keys?tenant=acme&state=failed_retryable&limit=2").Body
	mustContain(t, "paged search", small, "Select all the newest 3")
}

// bulkMAC signs a bulk plan for an operator the way the replay workflow does (a forged expiry
// needs a valid signature to reach the expiry check).
func bulkMAC(operatorID int64, plan string) string {
	k := hmac.New(sha256.New, testSecret)
	k.Write([]byte("idemops/console/confirmation/v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	fmt.Fprintf(m, "bulk|%d|%s", operatorID, plan)
	return hex.EncodeToString(m.Sum(nil))
}
