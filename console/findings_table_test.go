package console

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

var hrefPattern = regexp.MustCompile(`(?:href|action|hx-get|hx-post)="([^"]*)"`)

// TestFindingsTable_KindKeySidesLineTabsAndConfirmations: the findings table shows the kind as a
// labelled colour, the key by name, both sides' amounts formatted with money, the statement line
// linked; the state tabs count only what the operator may see and keep the other filters; every
// action is a button behind a confirmation that says what it does.
func TestFindingsTable_KindKeySidesLineTabsAndConfirmations(t *testing.T) {
	b := setup(t)
	b.addOperator("acme-op", access.RoleOperator, "acme")
	b.addOperator("globex-op", access.RoleOperator, "globex")
	b.setChannel("stripe", "acme")
	long := "order-ACME-0001-a-key-long-enough-to-be-truncated"
	a := b.seedKey("acme", "payment.charge", long, `{"amount":12000,"currency":"IDR"}`, true)
	p := b.seedKey("acme", "payment.charge", "acme-pending", `{"amount":500,"currency":"JPY"}`, false)
	g := b.seedKey("globex", "payment.charge", "globex-1", `{"amount":100,"currency":"USD"}`, true)
	run := b.seedReconRun("stripe")
	amount := b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", a.ID), &a.ID, `{"line": 7, "channel_status": "success",
		"channel_amount_minor": 12345, "channel_currency": "IDR", "local_state": "completed", "local_amount_minor": 12000,
		"currency": "IDR", "difference_minor": 345}`)
	only := b.seedFinding(run, "CHANNEL_ONLY", fmt.Sprintf("key:%d", p.ID), &p.ID, `{"line": 9, "channel_status": "success",
		"channel_amount_minor": 500, "channel_currency": "JPY", "local_state": "processing"}`)
	b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", g.ID), &g.ID, `{"line": 3}`) // globex: invisible to acme
	resolved := b.seedFinding(run, "LOCAL_ONLY", "txn:resolved", nil, `{}`)
	ignored := b.seedFinding(run, "DUPLICATE_IN_FILE", "txn:ignored", nil, `{"lines": [4, 5]}`)
	b.exec(`UPDATE discrepancies SET state = 'resolved', resolver = 'acme-op', reason_code = 'booked_next_day' WHERE id = ?`, resolved)
	b.exec(`UPDATE discrepancies SET state = 'ignored', resolver = 'acme-op', note = 'test file' WHERE id = ?`, ignored)

	c := b.signIn("acme-op")
	page := c.get("/reconcile/findings?kind=AMOUNT_MISMATCH&state=open")
	if page.Status != 200 {
		t.Fatalf("findings: %d", page.Status)
	}
	body := page.Body
	// The tabs count the acme findings of the kind only (the globex one is not counted) and keep
	// the kind filter.
	mustContain(t, "tabs", body, `id="finding-tabs"`,
		`href="/reconcile/findings?kind=AMOUNT_MISMATCH&amp;state=open" aria-current="page" id="tab-open">open <span class="count">1</span>`,
		`href="/reconcile/findings?kind=AMOUNT_MISMATCH&amp;state=resolved" id="tab-resolved">resolved <span class="count">0</span>`,
		`href="/reconcile/findings?kind=AMOUNT_MISMATCH" id="tab-all">all <span class="count">1</span>`,
		`<input type="hidden" name="state" value="open">`)
	// The row: kind label with its text and meaning, the key by name, both sides formatted with
	// money (IDR has two decimals), the statement line linked.
	row := between(t, body, fmt.Sprintf(`id="finding-%d"`, amount), "</tr>")
	mustContain(t, "row", row, `class="kind-label kind-AMOUNT_MISMATCH"`, "AMOUNT_MISMATCH</code>", "both succeeded with different amounts",
		fmt.Sprintf(`<a href="/keys/%d" translate="no">acme · payment.charge · <span class="mono" title="%s">order-ACME-0001-a-key-lo…</span></a>`, a.ID, long),
		fmt.Sprintf(`data-copy="%s"`, long),
		"success · 123.45 IDR", "completed · 120.00 IDR",
		fmt.Sprintf(`href="/reconcile/runs/%d/line?n=7"`, run), "line 7</a>",
		"Closes finding #"+fmt.Sprint(amount)+" as resolved (something was corrected) or ignored", `<summary class="danger">Close…</summary>`,
		fmt.Sprintf(`id="resolve-%d"`, amount), fmt.Sprintf(`id="ignore-%d"`, amount), `<option value="refunded_at_channel">`)
	mustNotContain(t, "row", row, "Recover…") // an amount mismatch is not recovered
	mustNotContain(t, "acme page", body, "globex-1", fmt.Sprintf("finding-%d", resolved), fmt.Sprintf("finding-%d", only))
	for _, m := range hrefPattern.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], "ACME-0001") {
			t.Errorf("the raw key went into a URL: %s", m[1])
		}
	}

	// Every state, no kind: the open tab counts both acme findings; recover names the key.
	all := c.get("/reconcile/findings?view=list").Body
	mustContain(t, "all tabs", all, `id="tab-open">open <span class="count">2</span>`, `id="tab-resolved">resolved <span class="count">1</span>`,
		`id="tab-ignored">ignored <span class="count">1</span>`, `aria-current="page" id="tab-all">all <span class="count">4</span>`)
	orow := between(t, all, fmt.Sprintf(`id="finding-%d"`, only), "</tr>")
	mustContain(t, "channel-only row", orow, "success · 500 JPY", "processing", "line 9</a>", "Recover…",
		html.EscapeString("Asks the channel for its document of acme · payment.charge · acme-pending"))
	irow := between(t, all, fmt.Sprintf(`id="finding-%d"`, ignored), "</tr>")
	mustContain(t, "ignored row", irow, "txn:ignored", "line 5</a>", "ignored")
	mustNotContain(t, "ignored row", irow, "Resolve…")

	// Findings of one key (by id, as the replay and key pages link them), the tabs keeping it.
	kb := c.get(fmt.Sprintf("/reconcile/findings?key=%d", p.ID)).Body
	mustContain(t, "key filter", kb, fmt.Sprintf(`id="finding-%d"`, only), fmt.Sprintf(`href="/reconcile/findings?key=%d&amp;state=open"`, p.ID),
		`id="tab-open">open <span class="count">1</span>`, fmt.Sprintf(`<input type="hidden" name="key" value="%d">`, p.ID))
	mustNotContain(t, "key filter", kb, fmt.Sprintf(`id="finding-%d"`, amount))
	if got := c.get("/reconcile/findings?key=abc"); got.Status != 400 || !strings.Contains(got.Body, "key: is not a key id") {
		t.Errorf("bad key filter: %d", got.Status)
	}

	// Acting keeps the filters: back to the same tab and kind.
	got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", amount), url.Values{"reason_code": {"refunded_at_channel"},
		"back": {"/reconcile/findings?kind=AMOUNT_MISMATCH&state=open"}}, true)
	if got.Status != 303 || !strings.Contains(got.Location, "kind=AMOUNT_MISMATCH") || !strings.Contains(got.Location, "state=open") {
		t.Fatalf("resolve: %d %q", got.Status, got.Location)
	}
	mustContain(t, "after resolve", c.get(got.Location).Body, `id="tab-open">open <span class="count">0</span>`,
		`id="tab-resolved">resolved <span class="count">1</span>`)

	// Another tenant's operator sees none of acme's findings, in the rows or the counts.
	gb := b.signIn("globex-op").get("/reconcile/findings?view=list").Body
	mustContain(t, "globex", gb, `id="tab-open">open <span class="count">1</span>`, `aria-current="page" id="tab-all">all <span class="count">1</span>`)
	mustNotContain(t, "globex", gb, long, "acme-pending")
}

// TestReconRunPage_ExplainsMatchedAndFindings: the run page says in words what parsed, loaded,
// matched and findings count, with the run's own figures.
func TestReconRunPage_ExplainsMatchedAndFindings(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	run := b.seedReconRun("stripe") // 3 parsed, 3 loaded, 2 matched, 1 CHANNEL_ONLY
	page := b.signIn("v").get(fmt.Sprintf("/reconcile/runs/%d", run))
	if page.Status != 200 {
		t.Fatalf("run page: %d", page.Status)
	}
	mustContain(t, "run page", page.Body, `id="run-explained"`, "<strong>Parsed</strong> (3)", "<strong>Matched</strong> (2)",
		"<strong>Findings</strong> (1)", "not that they agree", "a run can match every line and still have findings")
	mustNotContain(t, "run page", page.Body, `id="keys-without-account"`) // every key said its account
}

// TestReconRunPage_SaysWhichFindingsAreAboutKeysWithoutAnAccount: a run whose findings include
// keys recorded before channel accounts were (matched by tenant and currencies, as before)
// says how many, in the operator's language.
func TestReconRunPage_SaysWhichFindingsAreAboutKeysWithoutAnAccount(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.addOperator("v", access.RoleViewer, "*")
	run := b.seedReconRun("stripe")
	b.exec(`UPDATE recon_runs SET keys_without_account = 2 WHERE id = ?`, run)
	c := b.signIn("v")
	mustContain(t, "run page", c.get(fmt.Sprintf("/reconcile/runs/%d", run)).Body, `id="keys-without-account">2 of the findings are about keys`,
		"matched by tenant and the account&#39;s currencies")
	if r := c.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("language: %d", r.Status)
	}
	mustContain(t, "zh-CN run page", c.get(fmt.Sprintf("/reconcile/runs/%d", run)).Body, `id="keys-without-account">其中 2 项差异`)
	if got := c.api(fmt.Sprintf("/api/v1/reconcile/runs/%d", run), b.token("v")); !strings.Contains(got.Body, `"keys_without_account":2`) {
		t.Errorf("run API: %d %s", got.Status, truncate(got.Body, 300))
	}
}

// between is the part of s from the first from up to the next to (fails when absent).
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("%q not found", from)
	}
	s = s[i:]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}
