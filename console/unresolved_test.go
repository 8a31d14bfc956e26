package console

import (
	"regexp"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestDashboard_CountsKeysKeptUntilResolved: keys whose outcome is unknown (retention keeps them
// until resolved) are counted on the dashboard, only in the operator's tenants, and the card
// leads to exactly those keys.
func TestDashboard_CountsKeysKeptUntilResolved(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.seedFailed("acme", "timed-out-1", `{"amount":100,"currency":"USD"}`, true)
	b.seedFailed("acme", "timed-out-2", `{"amount":200,"currency":"USD"}`, true)
	b.seedFailed("acme", "declined", `{"amount":300,"currency":"USD"}`, false)
	b.seedFailed("globex", "timed-out-3", `{"amount":400,"currency":"USD"}`, true)
	c := b.signIn("olga")
	body := c.get("/").Body
	m := regexp.MustCompile(`href="/keys\?unresolved=1"><span class="figure">(\d+)</span>`).FindStringSubmatch(body)
	if m == nil || m[1] != "2" {
		t.Fatalf("dashboard's unresolved card: %v; want 2 (the acme keys that timed out)", m)
	}
	keys := c.get("/keys?unresolved=1").Body
	mustContain(t, "unresolved keys", keys, `class="mono">timed-out-1<`, `class="mono">timed-out-2<`)
	mustNotContain(t, "unresolved keys", keys, `class="mono">declined<`, "timed-out-3")
}
