package console

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/retention"
)

var nextBefore = regexp.MustCompile(`"next_before":(\d+)`)

// TestRetentionPolicyBelowFloor: a policy below the floor is refused with the reason (the
// field and the floor with its parts) shown on the form; nothing is saved or audited. A valid
// one is saved with its audit row.
func TestRetentionPolicyBelowFloor(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	c := b.signIn("a")
	form := url.Values{"operation": {"payment.charge"}, "state": {"completed"}, "keep_response": {"1d"}, "keep_key": {"2d"}}
	got := c.post("/retention/policies", form, true)
	if got.Status != 400 {
		t.Fatalf("below the floor: %d, want 400", got.Status)
	}
	mustContain(t, "refusal", got.Body, `id="policy-error"`, "keep_key: 2d is below the retention floor of 6d",
		"client retry 1d + back-fill 3d + reconciliation lag 2d", `value="payment.charge"`)
	form.Set("keep_response", "soon")
	mustContain(t, "bad period", c.post("/retention/policies", form, true).Body, "keep_response: &#34;soon&#34; is not a period")
	set, err := retention.ListPolicies(context.Background(), b.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Policies) != 0 {
		t.Errorf("policies saved after refusals: %+v", set.Policies)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action LIKE 'retention.%'`); n != 0 {
		t.Errorf("%d audit rows for refused changes", n)
	}
	// The API refuses it the same way.
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "a", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.apiPost("/api/v1/retention/policies", tok, map[string]string{"operation": "*", "state": "completed",
		"keep_response": "1d", "keep_key": "5d"}); got.Status != 400 || !strings.Contains(got.Body, "below the retention floor") {
		t.Errorf("api below the floor: %d %s", got.Status, got.Body)
	}

	form.Set("keep_response", "3d")
	form.Set("keep_key", "30d")
	if got := c.post("/retention/policies", form, true); got.Status != 303 {
		t.Fatalf("valid policy: %d", got.Status)
	}
	page := c.get("/retention?notice=saved")
	mustContain(t, "retention page", page.Body, "Policy saved", "payment.charge", "30d", `id="floor-total"><span class="duration">6 d</span><`)
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'retention.policy.save' AND target = 'policy:payment.charge/completed'`); n != 1 {
		t.Errorf("policy audit rows: %d, want 1", n)
	}
	// The floor cannot rise above it.
	got = c.post("/retention/floor", url.Values{"client_retry": {"24h"}, "backfill": {"40d"}, "reconciliation_lag": {"2d"}}, true)
	if got.Status != 400 || !strings.Contains(got.Body, `id="floor-error"`) {
		t.Errorf("floor above a policy: %d", got.Status)
	}
	if got := c.post("/retention/policies/delete", url.Values{"operation": {"payment.charge"}, "state": {"completed"}}, true); got.Status != 303 {
		t.Errorf("delete: %d", got.Status)
	}
	// A viewer reads the page without the forms.
	b.addOperator("v", access.RoleViewer, "*")
	mustNotContain(t, "viewer page", b.signIn("v").get("/retention").Body, `id="policy-form"`, `id="floor-form"`)
}

// TestRetentionDryRunChangesNothing: the preview counts the keys a purge would take, per
// operation, state and day, and deletes none of them.
func TestRetentionDryRunChangesNothing(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	k := b.seedKey("acme", "payment.charge", "old-1", `{"amount":100,"currency":"USD"}`, true)
	b.exec(`UPDATE idempotency_keys SET created_at = '2024-01-02T10:00:00Z', completed_at = '2024-01-02T10:00:00Z',
		updated_at = '2024-01-02T10:00:00Z', expires_at = now() - interval '1 day', response_expires_at = now() - interval '2 days'
		WHERE id = ?`, k.ID)
	c := b.signIn("v")
	got := c.get("/retention/preview?operation=payment.charge")
	if got.Status != 200 {
		t.Fatalf("preview: %d", got.Status)
	}
	mustContain(t, "preview", got.Body, "Would delete <strong>1</strong>", "2024-01-02", "payment.charge")
	if _, err := b.claims.Get(context.Background(), k.ID); err != nil {
		t.Fatalf("key gone after a dry run: %v", err)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys k JOIN key_responses r ON r.key_id = k.id AND r.day = k.response_day WHERE k.id = ?`, k.ID); n != 1 {
		t.Error("the dry run tombstoned the key")
	}
	// The dry run is in the purge history, marked as such.
	hist := c.get("/retention")
	mustContain(t, "history", hist.Body, "dry run", "operator:v")
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "v", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	api := c.api("/api/v1/retention/preview", tok)
	if api.Status != 200 || !strings.Contains(api.Body, `"would_delete":1`) {
		t.Errorf("api preview: %d %s", api.Status, api.Body)
	}
	if purges := c.api("/api/v1/retention/purges?limit=1", tok); purges.Status != 200 || !nextBefore.MatchString(purges.Body) {
		t.Errorf("api purges page: %d %s", purges.Status, purges.Body)
	}
}

// TestLegalHold: an admin sets and lifts a hold from the key page; each is audited; a key of a
// tenant the admin may not see is a 404.
func TestLegalHold(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "acme")
	k := b.seedKey("acme", "payment.charge", "hold-1", `{"amount":100,"currency":"USD"}`, true)
	g := b.seedKey("globex", "payment.charge", "hold-2", `{"amount":100,"currency":"USD"}`, true)
	c := b.signIn("a")
	mustContain(t, "key page", c.get("/keys/"+strconv.FormatInt(k.ID, 10)).Body, `id="set-hold"`)
	if got := c.post("/keys/"+strconv.FormatInt(k.ID, 10)+"/hold", url.Values{"hold": {"1"}, "reason": {"litigation 42"}}, true); got.Status != 303 {
		t.Fatalf("set hold: %d", got.Status)
	}
	if !b.key(k.ID).LegalHold {
		t.Error("hold not set")
	}
	mustContain(t, "held key page", c.get("/keys/"+strconv.FormatInt(k.ID, 10)).Body, `id="lift-hold"`, "legal_hold_set")
	if got := c.post("/keys/"+strconv.FormatInt(k.ID, 10)+"/hold", url.Values{"hold": {"0"}, "reason": {""}}, true); got.Status != 400 {
		t.Errorf("lift without a reason: %d, want 400", got.Status)
	}
	if got := c.post("/keys/"+strconv.FormatInt(g.ID, 10)+"/hold", url.Values{"hold": {"1"}, "reason": {"x"}}, true); got.Status != 404 || b.key(g.ID).LegalHold {
		t.Errorf("hold on another tenant's key: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'key.legal_hold.set' AND tenants = '{acme}'`); n != 1 {
		t.Errorf("hold audit rows: %d", n)
	}
}
