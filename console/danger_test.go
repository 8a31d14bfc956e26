package console

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/retention"
)

// TestDangerousActions_AskFirstAndNameTheConsequence: mark final, legal hold, pause, disabling
// an operator and deleting a policy each sit behind a confirmation step (a disclosure) that
// names what will happen, with the action's button in the danger style; a policy below the
// default periods is saved only once its consequence is confirmed.
func TestDangerousActions_AskFirstAndNameTheConsequence(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedFailed("acme", "k-1", `{"amount":1234,"currency":"CNY","payee":"alice"}`, true)
	if err := daemon.SaveSchedule(context.Background(), b.db, daemon.ScheduleSpec{Name: "reclaim", Job: "reclaim", Spec: "@every 1m"}); err != nil {
		t.Fatal(err)
	}
	if err := retention.SavePolicy(context.Background(), b.db, retention.Policy{Operation: "payment.charge", State: "completed",
		KeepResponse: 100 * 24 * 3600e9, KeepKey: 200 * 24 * 3600e9}, "test"); err != nil {
		t.Fatal(err)
	}
	c := b.signIn("root")
	for _, tc := range []struct{ page, id, consequence, button string }{
		{fmt.Sprintf("/keys/%d/replay", k.ID), "mark-final-button", "nothing is executed again. This cannot be undone.", "Yes, mark final"},
		{fmt.Sprintf("/keys/%d", k.ID), "set-hold", "Retention will never tombstone or purge this key", "Yes, put on legal hold"},
		{"/jobs", "pause-reclaim", "No run of reclaim starts on any daemon replica until someone resumes it", "Yes, pause reclaim"},
		{"/admin/operators", fmt.Sprintf("disable-%d", b.ops["olga"].ID), "olga is signed out at once", "Yes, disable olga"},
		{"/retention", "delete-policy-payment.charge-completed", "fall back to the * policy", "Yes, delete this policy"},
	} {
		got := c.get(tc.page)
		if got.Status != 200 {
			t.Fatalf("%s: %d", tc.page, got.Status)
		}
		block := regexp.MustCompile(`(?s)<details class="confirm" id="` + regexp.QuoteMeta(tc.id) + `-confirm">.*?</details>`).FindString(got.Body)
		if block == "" {
			t.Errorf("%s: no confirmation step %s-confirm", tc.page, tc.id)
			continue
		}
		mustContain(t, tc.page+" "+tc.id, block, `<summary class="danger">`, tc.consequence, `class="danger"`, tc.button, `name="csrf"`)
	}

	form := url.Values{"operation": {"payment.refund"}, "state": {"completed"}, "keep_response": {"1d"}, "keep_key": {"7d"}}
	got := c.post("/retention/policies", form, true)
	mustContain(t, "a shorter policy asks first", got.Body, `id="policy-shorter"`, "shorter than the default", "(a retry then executes again)", `name="confirm_shorter"`)
	if n := b.count(`SELECT count(*) FROM retention_policies WHERE operation = 'payment.refund'`); n != 0 {
		t.Fatalf("the shorter policy was saved before its confirmation")
	}
	form.Set("confirm_shorter", "yes")
	if got := c.post("/retention/policies", form, true); got.Status != 303 {
		t.Fatalf("confirmed shorter policy: %d %s", got.Status, truncate(got.Body, 300))
	}
	if n := b.count(`SELECT count(*) FROM retention_policies WHERE operation = 'payment.refund'`); n != 1 {
		t.Errorf("confirmed shorter policy: %d rows, want 1", n)
	}
}
