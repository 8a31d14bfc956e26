package console

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
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

// TestDashboard_BacklogCountsStopAtTheCap: past the cap a backlog card shows "N+" (labelled as
// a count that stopped there) and still leads to the keys; need attention, their sum, too; the
// API's figures stay exact; below the cap the figure is exact.
func TestDashboard_BacklogCountsStopAtTheCap(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.srv.smallCap = 3
	b.addOperator("olga", access.RoleOperator, "acme")
	for i := range 5 {
		b.seedFailed("acme", fmt.Sprintf("timed-out-%d", i), `{"amount":100,"currency":"USD"}`, true)
	}
	b.seedFailed("acme", "declined", `{"amount":300,"currency":"USD"}`, false)
	c := b.signIn("olga")
	body := c.get("/").Body
	capped := `<span class="figure" title="More than 3: the count stops there.">3+</span>`
	mustContain(t, "dashboard", body,
		`href="/keys?state=failed_retryable">`+capped, // the attention item and the open keys' card
		`href="/keys?unresolved=1">`+capped,
		`href="#attention">`)
	if n := strings.Count(body, `href="/keys?state=failed_retryable">`+capped); n != 2 {
		t.Errorf("failed retryable shown capped %d times, want 2 (attention, open keys)", n)
	}
	if m := regexp.MustCompile(`href="#attention"><span class="figure"[^>]*>([^<]*)<`).FindStringSubmatch(body); m == nil || m[1] != "3+" {
		t.Errorf("need attention: %v, want 3+ (a sum with a capped part)", m)
	}
	mustNotContain(t, "dashboard", body, `<span class="figure">5</span>`)

	var d struct {
		Attention map[string]int64 `json:"attention"`
		Open      map[string]int64 `json:"open_keys"`
	}
	if err := json.Unmarshal([]byte(c.api("/api/v1/dashboard", b.token("olga")).Body), &d); err != nil {
		t.Fatal(err)
	}
	if d.Attention["failed_retryable"] != 5 || d.Open["failed_retryable"] != 5 {
		t.Errorf("API: attention %v, open %v; want 5 failed retryable (exact)", d.Attention, d.Open)
	}

	b.srv.smallCap = 5 // five keys: exactly the cap, not past it
	b.srv.live = newLiveShare(liveTTL)
	body = c.get("/").Body
	mustContain(t, "dashboard at the cap", body, `href="/keys?state=failed_retryable"><span class="figure">5</span>`,
		`href="/keys?unresolved=1"><span class="figure">5</span>`)
	mustNotContain(t, "dashboard at the cap", body, "+</span>")
}
