package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// findingsOfAcme is where the findings tests start: operator o of acme, acme's stripe account,
// and a run of it holding n order findings ORD-<prefix>-0… (seedOrderFindings).
func findingsOfAcme(t *testing.T, prefix string, n int, mod ...func(*Config)) (*bundle, []int64) {
	t.Helper()
	b := newBundle(t, mod...)
	b.addOperator("o", access.RoleOperator, "acme")
	b.setChannel("stripe", "acme")
	return b, b.seedOrderFindings(b.seedReconRun("stripe"), prefix, n)
}

// seedOrderFindings stores n open CHANNEL_ONLY findings of run (channel stripe, 2024-03-01),
// each with a merchant order number "ORD-<prefix>-<i>" and an amount of 1000+i USD cents.
func (b *bundle) seedOrderFindings(run int64, prefix string, n int) []int64 {
	b.t.Helper()
	out := make([]int64, n)
	for i := range n {
		out[i] = b.seedFinding(run, "CHANNEL_ONLY", fmt.Sprintf("txn:%s-%d", prefix, i), nil,
			fmt.Sprintf(`{"merchant_order_no":"ORD-%s-%d","channel_amount_minor":%d,"channel_currency":"USD","channel_status":"success"}`,
				prefix, i, 1000+i))
	}
	return out
}

// waitFindingsBulk runs the daemon's jobs and waits for a bulk run of findings to end.
func (b *bundle) waitFindingsBulk(id int64) {
	b.t.Helper()
	b.runJobs()
	pgtest.Await(b.t, b.db, 15*time.Second, fmt.Sprintf("findings bulk run %d to finish", id), func() bool {
		return b.count(`SELECT count(*) FROM finding_bulk_runs WHERE id = ? AND state IN ('done', 'failed')`, id) == 1
	}, "finding_bulk_runs")
}

// TestDashboard_AttentionIsTheSumOfItsItemsAndOpenFindingsIsTheListsCount: GET /api/v1/dashboard
// answers each kind of thing that needs an operator, in the caller's scope; open_findings is
// the findings list's open count; the page's "need attention" is the sum, with a card per
// non-zero item linking to its list and none for a zero one.
func TestDashboard_AttentionIsTheSumOfItsItemsAndOpenFindingsIsTheListsCount(t *testing.T) {
	t.Parallel()
	b, ids := findingsOfAcme(t, "dash", 3)
	b.addOperator("g", access.RoleOperator, "globex")
	b.exec(`UPDATE discrepancies SET state = 'resolved' WHERE id = ?`, ids[0])
	b.seedFailed("acme", "retry-1", `{"amount":100,"currency":"USD"}`, true)

	c := b.signIn("o")
	got := c.api("/api/v1/dashboard", b.token("o"))
	if got.Status != 200 {
		t.Fatalf("dashboard API: %d %s", got.Status, got.Body)
	}
	var d struct {
		Attention     map[string]int64 `json:"attention"`
		NeedAttention int64            `json:"need_attention"`
	}
	if err := json.Unmarshal([]byte(got.Body), &d); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"open_findings", "failed_retryable", "needs_recovery", "expired_leases", "failed_jobs"} {
		if _, ok := d.Attention[k]; !ok {
			t.Errorf("attention lacks %q: %v", k, d.Attention)
		}
	}
	sum := int64(0)
	for _, n := range d.Attention {
		sum += n
	}
	if d.NeedAttention != sum || d.Attention["open_findings"] != 2 || d.Attention["failed_retryable"] != 1 {
		t.Errorf("attention %v, need_attention %d; want open_findings 2, failed_retryable 1, the sum %d", d.Attention, d.NeedAttention, sum)
	}
	list := c.get("/reconcile/findings?view=list").Body
	if m := regexp.MustCompile(`id="tab-open">open <span class="count">(\d+)</span>`).FindStringSubmatch(list); m == nil ||
		m[1] != fmt.Sprint(d.Attention["open_findings"]) {
		t.Errorf("the list's open count %v; the dashboard's %d", m, d.Attention["open_findings"])
	}
	page := c.get("/").Body
	mustContain(t, "dashboard", page, `href="/reconcile/findings?state=open"><span class="figure">2</span>`,
		`href="/keys?state=failed_retryable"><span class="figure">1</span>`, fmt.Sprintf(`<span class="figure">%d</span>`, sum))
	mustNotContain(t, "dashboard", page, `href="/jobs?status=failed"`) // zero: no card
	// Another tenant's operator: none of acme's.
	var g struct {
		Attention map[string]int64 `json:"attention"`
	}
	if err := json.Unmarshal([]byte(b.signIn("g").api("/api/v1/dashboard", b.token("g")).Body), &g); err != nil {
		t.Fatal(err)
	}
	if g.Attention["open_findings"] != 0 || g.Attention["failed_retryable"] != 0 {
		t.Errorf("globex's attention %v, want none of acme's", g.Attention)
	}
}

// TestFindings_GroupedByKindChannelDayWithCountsAndAmountsOrderNoSearchable: the page opens
// grouped with each group's count and amount; a merchant order number (exact or a prefix*)
// lists its findings with the order number and amount as columns.
func TestFindings_GroupedByKindChannelDayWithCountsAndAmountsOrderNoSearchable(t *testing.T) {
	t.Parallel()
	b, _ := findingsOfAcme(t, "grp", 3) // 10.00 + 10.01 + 10.02 USD
	c := b.signIn("o")
	page := c.get("/reconcile/findings").Body
	mustContain(t, "grouped page", page, `id="finding-groups"`, "3 findings in 1 groups", `<span class="group-count">3 findings</span>`,
		"30.03", "USD", `class="group-date"><time datetime="2024-03-01" class="day">`)
	mustNotContain(t, "grouped page", page, `<table class="findings`)
	one := c.get("/reconcile/findings?order_no=ORD-grp-1").Body
	mustContain(t, "exact order no", one, `<td class="mono finding-order" data-label="Merchant order no" translate="no">ORD-grp-1</td>`, "10.01")
	mustNotContain(t, "exact order no", one, "ORD-grp-0", "ORD-grp-2")
	prefix := c.get("/reconcile/findings?order_no=ORD-grp*").Body
	mustContain(t, "prefix order no", prefix, "ORD-grp-0", "ORD-grp-1", "ORD-grp-2")
	amount := c.get("/reconcile/findings?currency=USD&amount_min=10.01&amount_max=10.01").Body
	mustContain(t, "amount range", amount, "ORD-grp-1")
	mustNotContain(t, "amount range", amount, "ORD-grp-0", "ORD-grp-2")
	if got := c.get("/reconcile/findings?amount_min=1"); got.Status != 400 || !strings.Contains(got.Body, "currency") {
		t.Errorf("an amount without its currency: %d", got.Status)
	}
}

// TestFindings_BulkIgnoreThroughTheAPIPreviewsThenRunsAsAJobAuditedPerFindingThenReopen: the
// preview writes nothing and counts; the start runs as the daemon's job; every finding is
// closed with the reason and audited one by one; one is reopened, audited.
func TestFindings_BulkIgnoreThroughTheAPIPreviewsThenRunsAsAJobAuditedPerFindingThenReopen(t *testing.T) {
	t.Parallel()
	b, ids := findingsOfAcme(t, "bulk", 5)
	c := b.signIn("o")
	tok := b.token("o")
	body := map[string]any{"filter": map[string]any{"order_no": "ORD-bulk*"}, "action": "ignore", "reason_code": "test_transaction",
		"note": "load test orders", "preview": true}
	got := c.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	var p struct {
		Count   int64            `json:"count"`
		Amounts map[string]int64 `json:"amounts"`
		UpTo    int64            `json:"upto"`
	}
	if got.Status != 200 || json.Unmarshal([]byte(got.Body), &p) != nil || p.Count != 5 || p.Amounts["USD"] != 5010 {
		t.Fatalf("preview: %d %s; want count 5, USD 5010", got.Status, got.Body)
	}
	if n := b.count(`SELECT count(*) FROM finding_bulk_runs`); n != 0 {
		t.Fatalf("the preview stored %d runs", n)
	}
	body["reason_code"] = "not-a-reason"
	body["preview"] = false
	if got := c.apiPost("/api/v1/reconcile/findings/bulk", tok, body); got.Status != 400 || !strings.Contains(got.Body, "reason_code") {
		t.Errorf("a reason outside the vocabulary: %d %s", got.Status, got.Body)
	}
	body["reason_code"] = "test_transaction"
	got = c.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	var r struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
		Total int64  `json:"total"`
	}
	if got.Status != 202 || json.Unmarshal([]byte(got.Body), &r) != nil || r.State != "running" || r.Total != 5 {
		t.Fatalf("start: %d %s", got.Status, got.Body)
	}
	b.waitFindingsBulk(r.ID)
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'ignored' AND reason_code = 'test_transaction' AND note = 'load test orders'`); n != 5 {
		t.Errorf("%d findings ignored with the reason, want 5", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.finding.ignore' AND actor = 'operator:o'`); n != 5 {
		t.Errorf("%d audit rows of ignored findings, want one per finding (5)", n)
	}
	show := c.api(fmt.Sprintf("/api/v1/reconcile/findings/bulk/%d", r.ID), tok)
	if !strings.Contains(show.Body, `"state":"done"`) || !strings.Contains(show.Body, `"processed":5`) {
		t.Errorf("the run afterwards: %s", show.Body)
	}
	// Reopen one: open again, audited.
	got = c.apiPost(fmt.Sprintf("/api/v1/reconcile/findings/%d/reopen", ids[2]), tok, map[string]any{"reason_code": "closed_in_error",
		"note": "a real order"})
	if got.Status != 200 || b.findingState(ids[2]) != "open" {
		t.Fatalf("reopen: %d %s; state %s", got.Status, got.Body, b.findingState(ids[2]))
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.finding.reopen' AND target = ?`, fmt.Sprintf("finding:%d", ids[2])); n != 1 {
		t.Errorf("reopen audit rows: %d", n)
	}
	if got := c.apiPost(fmt.Sprintf("/api/v1/reconcile/findings/%d/reopen", ids[2]), tok, map[string]any{"reason_code": "closed_in_error"}); got.Status != 409 {
		t.Errorf("reopen an open finding: %d, want 409", got.Status)
	}
}

// TestFindings_BulkAboveTheCountWaitsForASecondOperator: four eyes over the configured count;
// the operator who started it cannot approve it, another one can.
func TestFindings_BulkAboveTheCountWaitsForASecondOperator(t *testing.T) {
	t.Parallel()
	b, _ := findingsOfAcme(t, "four", 3, func(c *Config) { c.Reconcile.BulkApprovalAbove = 2 })
	b.addOperator("p", access.RoleOperator, "acme")
	c := b.signIn("o")
	start := c.post("/reconcile/findings/bulk/start", url.Values{"scope": {"all"}, "state": {"open"}, "action": {"resolve"},
		"reason_code": {"corrected_at_channel"}, "note": {"fixed"}}, true)
	if start.Status != 303 {
		t.Fatalf("start: %d %s", start.Status, truncate(start.Body, 300))
	}
	mustContain(t, "waiting run", c.get(start.Location).Body, `id="bulk-state">pending_approval<`)
	if got := c.post(start.Location+"/approve", nil, true); got.Status != 409 {
		t.Errorf("approve your own run: %d, want 409", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'open'`); n != 3 {
		t.Errorf("%d open findings before the approval, want 3", n)
	}
	p := b.signIn("p")
	if got := p.post(start.Location+"/approve", nil, true); got.Status != 303 {
		t.Fatalf("a second operator approves: %d", got.Status)
	}
	var id int64
	fmt.Sscanf(strings.TrimPrefix(start.Location, "/reconcile/findings/bulk/"), "%d", &id)
	b.waitFindingsBulk(id)
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'resolved'`); n != 3 {
		t.Errorf("%d resolved after the approval, want 3", n)
	}
}

// TestFindings_RefusedFormsComeBackInPlaceWithTheNoteKept: a resolve without a reason and a bulk
// start with "other" but no note render their page again — the form open, the note as typed, the
// field's error in the operator's language — never an error page.
func TestFindings_RefusedFormsComeBackInPlaceWithTheNoteKept(t *testing.T) {
	t.Parallel()
	b, ids := findingsOfAcme(t, "form", 2)
	for _, lang := range []struct{ code, why, bulkWhy string }{
		{"en", "reason_code: choose a reason", "note: say why: the reason is &#34;other&#34;"},
		{"zh-CN", "请选择原因", "请说明原因"},
	} {
		c := b.signIn("o")
		if r := c.post("/settings/language", url.Values{"lang": {lang.code}}, true); r.Status != 303 {
			t.Fatalf("language: %d", r.Status)
		}
		note := "客户来电 " + lang.code
		got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", ids[0]), url.Values{"reason_code": {""}, "note": {note},
			"back": {"/reconcile/findings?state=open"}}, true)
		if got.Status != 400 {
			t.Fatalf("%s: refused resolve: %d", lang.code, got.Status)
		}
		mustContain(t, lang.code+" refused resolve", got.Body, fmt.Sprintf(`id="finding-%d"`, ids[0]),
			fmt.Sprintf(`<details class="confirm" id="close-%d-confirm" open`, ids[0]), `value="`+note+`"`, lang.why)
		got = c.post("/reconcile/findings/bulk/start", url.Values{"scope": {"all"}, "state": {"open"}, "action": {"ignore"},
			"reason_code": {"other"}, "note": {""}}, true)
		if got.Status != 400 {
			t.Fatalf("%s: refused bulk start: %d", lang.code, got.Status)
		}
		mustContain(t, lang.code+" refused bulk start", got.Body, `id="bulk-start"`, `id="bulk-error"`, lang.bulkWhy,
			`<option value="other" selected`)
		if b.findingState(ids[0]) != "open" || b.count(`SELECT count(*) FROM finding_bulk_runs`) != 0 {
			t.Fatalf("%s: a refused form changed something", lang.code)
		}
	}
}

// TestFindings_ExportCSVAndXLSXHoldThePagesColumnsInTheOperatorsZone: both formats carry the
// filter's findings with the order number, the amount as a decimal string beside its currency
// and the time with its offset; only what the operator may see; audited.
func TestFindings_ExportCSVAndXLSXHoldThePagesColumnsInTheOperatorsZone(t *testing.T) {
	t.Parallel()
	b, _ := findingsOfAcme(t, "exp", 3)
	b.addOperator("g", access.RoleOperator, "globex")
	c := b.signIn("o")
	if r := c.post("/settings/time-zone", url.Values{"time_zone": {"Asia/Shanghai"}}, true); r.Status != 303 {
		t.Fatalf("time zone: %d", r.Status)
	}
	csvResp := c.get("/reconcile/findings/export?format=csv&order_no=ORD-exp*")
	if csvResp.Status != 200 || !strings.HasPrefix(csvResp.Header.Get("Content-Type"), "text/csv") ||
		!strings.Contains(csvResp.Header.Get("Content-Disposition"), ".csv") {
		t.Fatalf("csv: %d %v", csvResp.Status, csvResp.Header)
	}
	lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(csvResp.Body, "\ufeff")), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "Finding,Run,Kind,Channel,Bill date,Merchant order no,Amount,Currency") {
		t.Fatalf("csv lines: %q", lines)
	}
	if !strings.Contains(csvResp.Body, "ORD-exp-2") || !strings.Contains(csvResp.Body, ",10.02,USD,") || !strings.Contains(csvResp.Body, "+08:00") {
		t.Errorf("csv rows: %q", lines[1:])
	}
	x := c.get("/reconcile/findings/export?format=xlsx&order_no=ORD-exp*")
	if x.Status != 200 {
		t.Fatalf("xlsx: %d", x.Status)
	}
	f, err := excelize.OpenReader(bytes.NewReader([]byte(x.Body)))
	if err != nil {
		t.Fatalf("xlsx does not open: %v", err)
	}
	defer f.Close()
	rows, err := f.GetRows(f.GetSheetName(0))
	if err != nil || len(rows) != 4 || rows[0][5] != "Merchant order no" || rows[1][6] == "" {
		t.Fatalf("xlsx rows %q (%v)", rows, err)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.findings.export'`); n != 2 {
		t.Errorf("export audit rows: %d, want 2", n)
	}
	if got := b.signIn("g").get("/reconcile/findings/export?format=csv"); got.Status != 200 || strings.Contains(got.Body, "ORD-exp") {
		t.Errorf("another tenant's export: %d, holds acme's findings: %v", got.Status, strings.Contains(got.Body, "ORD-exp"))
	}
	if got := c.get("/reconcile/findings/export?format=pdf"); got.Status != 400 || !strings.Contains(got.Body, "is csv or xlsx") {
		t.Errorf("an unknown format: %d", got.Status)
	}
}

// TestFindings_BulkOfASelectionActsOnThePickedFindingsOnly: findings picked by hand (the API's
// "ids", the page's scope=selected) are previewed and closed alone — not the rest of what the
// filter matches, and not another tenant's finding slipped into the list.
func TestFindings_BulkOfASelectionActsOnThePickedFindingsOnly(t *testing.T) {
	t.Parallel()
	b, ids := findingsOfAcme(t, "pick", 4)
	other := b.seedReconRun("adyen")
	foreign := b.seedFinding(other, "CHANNEL_ONLY", "txn:foreign", nil,
		`{"merchant_order_no":"ORD-foreign","channel_amount_minor":5,"channel_currency":"USD"}`)
	b.exec(`UPDATE discrepancies SET channel = 'adyen', tenant = 'globex' WHERE id = ?`, foreign)
	c := b.signIn("o")
	tok := b.token("o")
	body := map[string]any{"filter": map[string]any{}, "ids": []int64{ids[0], ids[2], foreign}, "action": "resolve",
		"reason_code": "corrected_at_channel", "note": "picked", "preview": true}
	got := c.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	var p struct {
		Count   int64            `json:"count"`
		Amounts map[string]int64 `json:"amounts"`
	}
	if got.Status != 200 || json.Unmarshal([]byte(got.Body), &p) != nil || p.Count != 2 || p.Amounts["USD"] != 1000+1002 {
		t.Fatalf("preview of a selection: %d %s; want count 2, USD 2002", got.Status, got.Body)
	}
	body["preview"] = false
	got = c.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	var r struct {
		ID    int64 `json:"id"`
		Total int64 `json:"total"`
	}
	if got.Status != 202 || json.Unmarshal([]byte(got.Body), &r) != nil || r.Total != 2 {
		t.Fatalf("start of a selection: %d %s", got.Status, got.Body)
	}
	b.waitFindingsBulk(r.ID)
	for i, want := range []string{"resolved", "open", "resolved", "open"} {
		if st := b.findingState(ids[i]); st != want {
			t.Errorf("finding %d (ORD-pick-%d): %s, want %s", ids[i], i, st, want)
		}
	}
	if st := b.findingState(foreign); st != "open" {
		t.Errorf("another tenant's finding in the selection: %s, want open", st)
	}
	// The page's form: scope=selected with the ticked ids previews those only.
	page := c.post("/reconcile/findings/bulk", url.Values{"scope": {"selected"}, "id": {fmt.Sprint(ids[1])}, "state": {"open"}}, true)
	if page.Status != 200 {
		t.Fatalf("page preview of a selection: %d %s", page.Status, truncate(page.Body, 300))
	}
	mustContain(t, "page preview", page.Body, `id="bulk-count"`, "ORD-pick-1", `name="scope" value="selected"`)
	mustNotContain(t, "page preview", page.Body, "ORD-pick-3")
}

// TestFindings_ExportAboveTheCapIsRefusedNamingIt: an export matching more findings than the
// cap writes nothing: the page comes back saying the cap (in the operator's language), the API
// answers 409; at the cap it downloads.
func TestFindings_ExportAboveTheCapIsRefusedNamingIt(t *testing.T) {
	t.Parallel()
	b, _ := findingsOfAcme(t, "cap", 3, func(c *Config) { c.FindingsExportCap = 2 })
	c := b.signIn("o")
	got := c.get("/reconcile/findings/export?format=csv&order_no=ORD-cap*")
	if got.Status != 409 || strings.HasPrefix(got.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("page export over the cap: %d %s", got.Status, got.Header.Get("Content-Type"))
	}
	mustContain(t, "refused export", got.Body, `id="findings-error"`, "more than 2 findings match; an export holds at most 2", "ORD-cap-2")
	api := c.api("/api/v1/reconcile/findings/export?format=xlsx&order_no=ORD-cap*", b.token("o"))
	if api.Status != 409 || !strings.Contains(api.Body, "at most 2") {
		t.Errorf("API export over the cap: %d %s", api.Status, truncate(api.Body, 300))
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.findings.export'`); n != 0 {
		t.Errorf("a refused export audited as done: %d rows", n)
	}
	if r := c.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("language: %d", r.Status)
	}
	mustContain(t, "zh-CN refused export", c.get("/reconcile/findings/export?format=csv&order_no=ORD-cap*").Body, `id="findings-error"`, "一次导出最多 2 项")
	ok := c.get("/reconcile/findings/export?format=csv&order_no=ORD-cap-1*")
	if ok.Status != 200 || !strings.Contains(ok.Body, "ORD-cap-1") {
		t.Errorf("an export under the cap: %d", ok.Status)
	}
}
