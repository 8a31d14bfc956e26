package console

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/reconcile"
)

// seedReconJob creates a recon job through the reconciler (which mirrors it into a schedule).
func (b *bundle) seedReconJob(name string) {
	b.t.Helper()
	if _, err := b.srv.recon.CreateJob(context.Background(), reconcile.JobSpec{Name: name, Channel: "stripe", Format: "stripe",
		Source: "/data/{date}.csv", Operations: []string{"payment.charge"}, CronSpec: "0 6 * * *", TimeZone: "UTC", Enabled: true}); err != nil {
		b.t.Fatal(err)
	}
}

// seedReconRun stores a finished run, as the reconciler leaves one.
func (b *bundle) seedReconRun(channel string) int64 {
	b.t.Helper()
	var ids []int64
	if err := b.db.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor, rows_parsed, rows_loaded, rows_matched, counts, finished_at)
		VALUES (?, '2024-03-01', 'succeeded', 'daemon', 3, 3, 2, '{"CHANNEL_ONLY": 1}', now()) RETURNING id`, channel).Scan(&ids).Error; err != nil {
		b.t.Fatal(err)
	}
	return ids[0]
}

// seedFinding stores an open finding of run (keyID nil: channel-level).
func (b *bundle) seedFinding(run int64, kind, subject string, keyID *int64, detail string) int64 {
	b.t.Helper()
	var ids []int64
	if err := b.db.Raw(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id, detail)
		VALUES (?, ?, 'stripe', '2024-03-01', ?, ?, ?, ?::jsonb) RETURNING id`, run, run, kind, subject, keyID, detail).Scan(&ids).Error; err != nil {
		b.t.Fatal(err)
	}
	return ids[0]
}

func (b *bundle) findingState(id int64) string {
	b.t.Helper()
	var st []string
	if err := b.db.Raw(`SELECT state FROM discrepancies WHERE id = ?`, id).Scan(&st).Error; err != nil || len(st) != 1 {
		b.t.Fatalf("finding %d: %v", id, err)
	}
	return st[0]
}

// TestFindingResolveIgnoreAudited: resolving and ignoring a finding close it and write an audit
// row naming the operator, the finding and the reason.
func TestFindingResolveIgnoreAudited(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "acme")
	b.setChannel("stripe", "acme")
	run := b.seedReconRun("stripe")
	f1 := b.seedFinding(run, "LOCAL_ONLY", "txn:one", nil, `{}`)
	f2 := b.seedFinding(run, "DUPLICATE_IN_FILE", "txn:two", nil, `{}`)
	c := b.signIn("o")

	got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", f1), url.Values{"reason_code": {"booked_other_day"},
		"note": {"on the 2nd"}, "back": {"/reconcile/findings?kind=LOCAL_ONLY"}}, true)
	if got.Status != 303 || !strings.HasPrefix(got.Location, "/reconcile/findings?") || !strings.Contains(got.Location, "kind=LOCAL_ONLY") {
		t.Fatalf("resolve: %d %q", got.Status, got.Location)
	}
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", f2), url.Values{"reason_code": {"Bad Code!"}}, true); got.Status != 400 ||
		!strings.Contains(got.Body, "reason_code") {
		t.Errorf("bad reason code: %d", got.Status)
	}
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/ignore", f2), url.Values{"reason_code": {"test_transaction"}, "note": {"test file"},
		"back": {"https://evil.example/"}}, true); got.Status != 303 ||
		got.Location != "/reconcile/findings?notice=ignored" {
		t.Fatalf("ignore: %d %q", got.Status, got.Location)
	}
	if s1, s2 := b.findingState(f1), b.findingState(f2); s1 != "resolved" || s2 != "ignored" {
		t.Errorf("states %s, %s; want resolved, ignored", s1, s2)
	}
	for _, a := range []struct {
		action string
		id     int64
		reason string
	}{{"reconcile.finding.resolve", f1, "booked_other_day"}, {"reconcile.finding.ignore", f2, "test file"}} {
		// The console's handle reads the log under row-level security: as an administrator of every tenant.
		rows, _, err := b.srv.audit.List(tenantdb.WithTenants(context.Background(), []string{tenantdb.AllTenants}), audit.Filter{Action: a.action, Target: fmt.Sprintf("finding:%d", a.id)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Actor != "operator:o" || !strings.Contains(rows[0].Detail, a.reason) {
			t.Errorf("%s audit rows %+v", a.action, rows)
		}
	}
	// Closing it again is a 409 with the reason.
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/ignore", f1), url.Values{"reason_code": {"test_transaction"}, "note": {"again"}}, true); got.Status != 409 ||
		!strings.Contains(got.Body, "already closed") {
		t.Errorf("ignore a resolved finding: %d", got.Status)
	}
	page := c.get("/reconcile/findings?state=resolved&view=list")
	mustContain(t, "resolved findings", page.Body, "txn:one", "Booked on another day")
	mustNotContain(t, "resolved findings", page.Body, "txn:two")
}

// TestRecoverRefusedForCompletedKey: recover applies to keys that did not complete; for a
// completed key it is refused with the reason and the finding stays open.
func TestRecoverRefusedForCompletedKey(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "acme")
	b.setChannel("stripe", "acme")
	k := b.seedKey("acme", "payment.charge", "done-1", `{"amount":100,"currency":"USD"}`, true)
	run := b.seedReconRun("stripe")
	f := b.seedFinding(run, "CHANNEL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID, `{"channel_status":"success"}`)
	got := b.signIn("o").post(fmt.Sprintf("/reconcile/findings/%d/recover", f), url.Values{"note": {"try"}}, true)
	if got.Status != 409 || !strings.Contains(got.Body, "is completed") {
		t.Errorf("recover of a completed key: %d, want 409 naming the state", got.Status)
	}
	if st := b.findingState(f); st != "open" {
		t.Errorf("finding %s after a refused recover, want open", st)
	}
	if k2 := b.key(k.ID); k2.State != k.State || k2.Attempts != k.Attempts {
		t.Errorf("key changed: %s/%d", k2.State, k2.Attempts)
	}
}

// TestFindingTenantIsolation: a key-level finding is shown, and can be acted on, only by
// operators who may see the key's tenant; channel-level findings are shown to everyone.
func TestFindingTenantIsolation(t *testing.T) {
	b := setup(t)
	b.addOperator("acme-op", access.RoleOperator, "acme")
	b.addOperator("all", access.RoleViewer, "*")
	a := b.seedKey("acme", "payment.charge", "acme-1", `{"amount":100,"currency":"USD"}`, true)
	g := b.seedKey("globex", "payment.charge", "globex-1", `{"amount":100,"currency":"USD"}`, true)
	b.setChannel("stripe", "acme")
	run := b.seedReconRun("stripe")
	fa := b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", a.ID), &a.ID, `{}`)
	fg := b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", g.ID), &g.ID, `{"note":"GLOBEX-DETAIL"}`)
	gone := int64(999999) // a key purged since: its tenant is unknown
	fx := b.seedFinding(run, "LOCAL_ONLY", "key:999999", &gone, `{"note":"PURGED-DETAIL"}`)
	fc := b.seedFinding(run, "CHANNEL_ONLY", "txn:channel-level", nil, `{}`)
	// Enough channel-level findings after the globex one that a page of 2 must skip it.
	for i := range 3 {
		b.seedFinding(run, "DUPLICATE_IN_FILE", fmt.Sprintf("txn:dup-%d", i), nil, `{}`)
	}

	c := b.signIn("acme-op")
	page := c.get("/reconcile/findings?view=list")
	mustContain(t, "acme findings", page.Body, fmt.Sprintf(`href="/keys/%d"`, a.ID), "txn:channel-level")
	mustNotContain(t, "acme findings", page.Body, fmt.Sprintf("key:%d", g.ID), "GLOBEX-DETAIL", "PURGED-DETAIL")
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", fg), url.Values{"reason_code": {"corrected_locally"}}, true); got.Status != 404 {
		t.Errorf("resolve another tenant's finding: %d, want 404", got.Status)
	}
	if b.findingState(fg) != "open" {
		t.Error("another tenant's finding was closed")
	}
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "acme-op", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Paged by 2 through the API: every visible finding once, the others never.
	seen := map[string]bool{}
	path := "/api/v1/reconcile/findings?limit=2"
	for range 10 {
		got := c.api(path, tok)
		if got.Status != 200 {
			t.Fatalf("%s: %d", path, got.Status)
		}
		mustNotContain(t, path, got.Body, "GLOBEX-DETAIL", "PURGED-DETAIL")
		for _, id := range []int64{fa, fc, fg, fx} {
			if strings.Contains(got.Body, fmt.Sprintf(`"id":%d,`, id)) {
				seen[strconv.FormatInt(id, 10)] = true
			}
		}
		m := nextBefore.FindStringSubmatch(got.Body)
		if m == nil {
			break
		}
		path = "/api/v1/reconcile/findings?limit=2&before=" + m[1]
	}
	if !seen[strconv.FormatInt(fa, 10)] || !seen[strconv.FormatInt(fc, 10)] || seen[strconv.FormatInt(fg, 10)] || seen[strconv.FormatInt(fx, 10)] {
		t.Errorf("findings seen through the API pages: %v", seen)
	}
	// An operator of every tenant sees them all.
	all := b.signIn("all").get("/reconcile/findings?view=list")
	mustContain(t, "all findings", all.Body, "GLOBEX-DETAIL", "PURGED-DETAIL")
}

// TestUploadMalformedStatement: a statement with a bad row is answered 422 with its line
// number, and nothing of it is imported.
func TestUploadMalformedStatement(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "*")
	file, err := os.ReadFile("../reconcile/testdata/stripe/bad_gross.csv")
	if err != nil {
		t.Fatal(err)
	}
	c := b.signIn("o")
	got := c.upload("/reconcile/upload", map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}, file)
	if got.Status != 422 || !strings.Contains(got.Body, "line 3: gross") {
		t.Fatalf("malformed upload: %d, want 422 with line 3", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines`) + b.count(`SELECT count(*) FROM statements`); n != 0 {
		t.Errorf("%d statement rows imported from a malformed file", n)
	}
	if n := b.count(`SELECT count(*) FROM recon_runs WHERE status = 'failed'`); n != 1 {
		t.Errorf("%d failed runs recorded, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.statement.upload' AND detail::jsonb->>'outcome' LIKE 'error: line 3%'`); n != 1 {
		t.Errorf("upload audit rows with its outcome: %d, want 1", n)
	}
	// A good statement is imported and its run shown.
	good, err := os.ReadFile("../reconcile/testdata/stripe/itemized.csv")
	if err != nil {
		t.Fatal(err)
	}
	got = c.upload("/reconcile/upload", map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}, good)
	if got.Status != 303 || !strings.HasPrefix(got.Location, "/reconcile/runs/") {
		t.Fatalf("good upload: %d %q", got.Status, got.Location)
	}
	mustContain(t, "run page", c.get(got.Location).Body, "succeeded")
	if n := b.count(`SELECT count(*) FROM statement_lines`); n == 0 {
		t.Error("good statement: no lines imported")
	}
	// Over the size limit: refused before anything is read into the reconciler.
	small := newBundle(t, func(cfg *Config) { cfg.UploadLimit = 1 << 10 })
	small.addOperator("o", access.RoleOperator, "*")
	tok, err := small.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "o", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := small.client()
	big := bytes.Repeat([]byte("x"), 200<<10)
	if got := sc.uploadAPI("/api/v1/reconcile/statements", tok, map[string]string{"channel": "stripe", "format": "stripe"}, big); got.Status != 413 {
		t.Errorf("oversized upload: %d, want 413", got.Status)
	}
}

func multipartBody(fields map[string]string, file []byte) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	fw, _ := w.CreateFormFile("statement", "statement.csv")
	_, _ = fw.Write(file)
	_ = w.Close()
	return &buf, w.FormDataContentType()
}

func (c *client) upload(path string, fields map[string]string, file []byte) resp {
	body, ct := multipartBody(fields, file)
	req, _ := http.NewRequest("POST", c.b.ts.URL+path, body)
	req.Header.Set("Content-Type", ct)
	return c.do(req)
}

func (c *client) uploadAPI(path, token string, fields map[string]string, file []byte) resp {
	body, ct := multipartBody(fields, file)
	req, _ := http.NewRequest("POST", c.b.ts.URL+path, body)
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+token)
	return c.do(req)
}

// TestReconJobCron: an invalid cron spec is refused with a one-line error naming the field and
// nothing is stored; a valid one shows its next five runs.
func TestReconJobCron(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	c := b.signIn("a")
	form := url.Values{"name": {"bad-cron"}, "channel": {"stripe"}, "format": {"stripe"}, "source": {"/data/{date}.csv"},
		"cron_spec": {"61 * * * *"}, "time_zone": {"UTC"}, "enabled": {"1"}, "operations": {"payment.charge"}}
	got := c.post("/reconcile/jobs", form, true)
	if got.Status != 400 || !strings.Contains(got.Body, `id="job-error"`) || !strings.Contains(got.Body, "cron_spec") {
		t.Fatalf("bad cron: %d", got.Status)
	}
	mustContain(t, "bad cron form", got.Body, `value="bad-cron"`, `id="cron-error"`)
	if n := b.count(`SELECT count(*) FROM recon_jobs`); n != 0 {
		t.Errorf("%d jobs stored after a refused form", n)
	}
	partial := c.get("/reconcile/next-runs?cron_spec=" + url.QueryEscape("0 6 * * *") + "&time_zone=Asia/Shanghai")
	// 06:00 in Shanghai, shown in the operator's zone (UTC) like every time of the console.
	if n := strings.Count(partial.Body, "<li>"); n != 5 || !strings.Contains(partial.Body, " 22:00:00 UTC</time>") {
		t.Errorf("next runs: %d entries in %q", n, partial.Body)
	}
	mustContain(t, "bad spec partial", c.get("/reconcile/next-runs?cron_spec=nope").Body, "cron_spec")

	form.Set("cron_spec", "30 5 * * *")
	got = c.post("/reconcile/jobs", form, true)
	if got.Status != 303 || got.Location != "/reconcile/jobs/bad-cron?notice=created" {
		t.Fatalf("create: %d %q", got.Status, got.Location)
	}
	page := c.get(got.Location)
	mustContain(t, "job page", page.Body, "30 5 * * *", "Recon job created")
	if n := strings.Count(page.Body, "<li>"); n != 5 {
		t.Errorf("job page lists %d next runs, want 5", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.job.create' AND target = 'recon_job:bad-cron'`); n != 1 {
		t.Errorf("job create audit rows: %d", n)
	}
	// Disable pauses the daemon schedule; run now asks for a run.
	if got := c.post("/reconcile/jobs/bad-cron/enabled", url.Values{"enabled": {"0"}}, true); got.Status != 303 {
		t.Fatalf("disable: %d", got.Status)
	}
	if got := c.post("/reconcile/jobs/bad-cron/run", nil, true); got.Status != 303 {
		t.Fatalf("run now: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM schedules WHERE name = ? AND paused AND run_requested_at IS NOT NULL`, reconcile.ScheduleName("bad-cron")); n != 1 {
		t.Errorf("schedule not paused with a run requested")
	}
	if got := c.post("/reconcile/jobs/no-such/run", nil, true); got.Status != 404 {
		t.Errorf("run an unknown job: %d", got.Status)
	}
}

// TestReconJobFeeScheduleAndSettlementFindings: the job form takes a fee schedule (a bad one is
// refused naming its field, nothing stored); settlement and fee findings are listed with their
// amounts formatted in their currency, and resolve like every other kind.
func TestReconJobFeeScheduleAndSettlementFindings(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	c := b.signIn("a")
	form := url.Values{"name": {"stripe-fees"}, "channel": {"stripe"}, "format": {"stripe"}, "source": {"/data/{date}.csv"},
		"cron_spec": {"0 6 * * *"}, "time_zone": {"UTC"}, "enabled": {"1"}, "operations": {"payment.charge"},
		"fee_rate_bp": {"2.9%"}, "fee_fixed_minor": {"30"}, "fee_rounding": {"half_up"}, "fee_decimals": {"0"}, "fee_refunds": {"kept"}}
	if got := c.post("/reconcile/jobs", form, true); got.Status != 400 || !strings.Contains(got.Body, "fee_schedule.rate_bp") {
		t.Fatalf("bad fee rate: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM recon_jobs`); n != 0 {
		t.Fatalf("%d jobs stored after a refused form", n)
	}
	form.Set("fee_rate_bp", "290")
	if got := c.post("/reconcile/jobs", form, true); got.Status != 303 {
		t.Fatalf("create: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM recon_jobs WHERE fee_schedule->>'rate_bp' = '290' AND (fee_schedule->>'fixed_minor')::int = 30
		AND fee_schedule->>'refunds' = 'kept'`); n != 1 {
		t.Fatalf("fee schedule not stored")
	}
	mustContain(t, "job page", c.get("/reconcile/jobs/stripe-fees").Body, `name="fee_rate_bp" value="290"`)

	run := b.seedReconRun("stripe")
	settle := b.seedFinding(run, "SETTLEMENT_MISMATCH", "settlement:payout po_1:USD", nil,
		`{"group":"payout po_1","currency":"USD","stated_minor":4500,"computed_minor":4564,"difference_minor":-64}`)
	b.seedFinding(run, "FEE_MISMATCH", "fee:success:ch_1:1", nil,
		`{"currency":"CNY","fee_minor":0.02,"expected_fee_minor":0.021,"difference_minor":-0.001}`)
	page := c.get("/reconcile/findings?run=" + strconv.FormatInt(run, 10))
	mustContain(t, "findings", page.Body, "stated 45.00 USD, computed 45.64 USD, difference -0.64 USD",
		"fee 0.00020 CNY, expected 0.00021 CNY, difference -0.00001 CNY", `value="SETTLEMENT_MISMATCH"`, `value="FEE_MISMATCH"`)
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/resolve", settle), url.Values{"reason_code": {"corrected_at_channel"}}, true); got.Status != 303 {
		t.Fatalf("resolve: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.finding.resolve' AND target = ?`, fmt.Sprintf("finding:%d", settle)); n != 1 {
		t.Errorf("resolve audit rows: %d", n)
	}
}

// TestUploadPackedStatements: an uploaded Alipay bill zip (业务明细 + 汇总, GBK names) is
// imported with its settlement; a gzip bomb is refused (413) with the reason and nothing is
// imported.
func TestUploadPackedStatements(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "*")
	c := b.signIn("o")

	var bomb bytes.Buffer
	gz := gzip.NewWriter(&bomb)
	gz.Write(bytes.Repeat([]byte("\n"), 4<<20))
	gz.Close()
	got := c.upload("/reconcile/upload", map[string]string{"channel": "wechat", "format": "wechat", "csrf": c.csrf}, bomb.Bytes())
	if got.Status != 413 || !strings.Contains(got.Body, "gzip stream unpacks to more than 200×") {
		t.Fatalf("gzip bomb: %d, want 413 naming it", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines`) + b.count(`SELECT count(*) FROM statements`); n != 0 {
		t.Fatalf("%d statement rows imported from a bomb", n)
	}

	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for name, src := range map[string]string{"2088_20240301_业务明细.csv": "trade_detail.csv", "2088_20240301_业务明细(汇总).csv": "trade_detail.summary.csv"} {
		gbk, _ := simplifiedchinese.GBK.NewEncoder().String(name)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: gbk, Method: zip.Deflate, NonUTF8: true})
		data, err := os.ReadFile("../reconcile/testdata/alipay/" + src)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	zw.Close()
	got = c.upload("/reconcile/upload", map[string]string{"channel": "alipay", "format": "alipay", "csrf": c.csrf}, zb.Bytes())
	if got.Status != 303 {
		t.Fatalf("zip upload: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM statements WHERE (summary->'settlements'->0->>'stated_minor')::numeric = 126735`); n != 1 {
		t.Errorf("the zip's 汇总 settlement was not read")
	}
}

// setChannel gives a channel account its tenants, as a "*" administrator would.
func (b *bundle) setChannel(channel string, tenants ...string) {
	b.t.Helper()
	b.exec(`INSERT INTO channel_accounts (channel, tenants, updated_by) VALUES (?, ?::text[], 'test')
		ON CONFLICT (channel) DO UPDATE SET tenants = EXCLUDED.tenants`, channel, "{"+strings.Join(tenants, ",")+"}")
}

// TestRecover_ChannelNotSucceeded_NoButtonAndRefused: the Recover button and the recover action
// ask one rule (reconcile's Finding.Recoverable). A CHANNEL_ONLY finding whose channel status is
// not success offers no Recover button, and posting recover anyway is refused with the reason;
// the same finding with a successful channel status offers it.
func TestRecover_ChannelNotSucceeded_NoButtonAndRefused(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "acme")
	b.setChannel("stripe", "acme")
	k := b.seedKey("acme", "payment.charge", "pending-1", `{"amount":100,"currency":"USD"}`, false)
	ok := b.seedKey("acme", "payment.charge", "pending-2", `{"amount":100,"currency":"USD"}`, false)
	run := b.seedReconRun("stripe")
	failed := b.seedFinding(run, "CHANNEL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID, `{"channel_status":"failed"}`)
	success := b.seedFinding(run, "CHANNEL_ONLY", fmt.Sprintf("key:%d", ok.ID), &ok.ID, `{"channel_status":"success"}`)
	c := b.signIn("o")
	body := c.get("/reconcile/findings?view=list").Body
	mustNotContain(t, "failed-channel row", between(t, body, fmt.Sprintf(`id="finding-%d"`, failed), "</tr>"), "Recover…")
	mustContain(t, "successful-channel row", between(t, body, fmt.Sprintf(`id="finding-%d"`, success), "</tr>"), "Recover…")
	got := c.post(fmt.Sprintf("/reconcile/findings/%d/recover", failed), url.Values{"note": {"try"}}, true)
	if got.Status != 409 || !strings.Contains(got.Body, "the channel did not succeed") {
		t.Errorf("recover with a failed channel status: %d, want 409 saying the channel did not succeed", got.Status)
	}
	if st := b.findingState(failed); st != "open" {
		t.Errorf("finding %s after a refused recover, want open", st)
	}
	if k2 := b.key(k.ID); k2.State != k.State || k2.Attempts != k.Attempts {
		t.Errorf("key changed: %s/%d", k2.State, k2.Attempts)
	}
}
