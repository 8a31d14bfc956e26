package console

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestReconTenants_UploadRunNowAndListsStayInsideTheChannelAccount: a channel account of acme
// and globex is refused to an operator of acme alone — upload (page and API) and run now answer
// 403, are audited as refused and write nothing — and its runs and findings are neither listed
// nor found for them; a channel nobody assigned is "*"-only; only a "*" administrator sets a
// channel account's tenants, and once it is acme's alone the acme operator's upload goes through.
func TestReconTenants_UploadRunNowAndListsStayInsideTheChannelAccount(t *testing.T) {
	b := setup(t)
	b.addOperator("acme-op", access.RoleOperator, "acme")
	b.addOperator("acme-admin", access.RoleAdmin, "acme")
	b.addOperator("root", access.RoleAdmin, "*")
	b.seedReconJob("daily") // channel stripe
	b.setChannel("stripe", "acme", "globex")
	run := b.seedReconRun("stripe")
	b.exec(`UPDATE recon_runs SET counts = '{"CHANNEL_ONLY": 7345}' WHERE id = ?`, run)
	finding := b.seedFinding(run, "CHANNEL_ONLY", "txn:GLOBEX-SHARED", nil, `{}`)
	file, err := os.ReadFile("../reconcile/testdata/stripe/itemized.csv")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "acme-op", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	c := b.signIn("acme-op")
	written := func() int64 {
		return b.count(`SELECT count(*) FROM statements`) + b.count(`SELECT count(*) FROM statement_lines`) +
			b.count(`SELECT count(*) FROM recon_runs`)
	}
	before := written()
	for _, channel := range []string{"stripe", "never-assigned"} {
		got := c.upload("/reconcile/upload", map[string]string{"channel": channel, "format": "stripe", "csrf": c.csrf}, file)
		if got.Status != 403 {
			t.Errorf("upload to %s by an operator of acme: %d, want 403", channel, got.Status)
		}
		mustNotContain(t, "upload refusal", got.Body, "globex", "7345")
		if got := c.uploadAPI("/api/v1/reconcile/statements", tok, map[string]string{"channel": channel, "format": "stripe"}, file); got.Status != 403 {
			t.Errorf("API upload to %s: %d, want 403", channel, got.Status)
		}
	}
	if got := c.post("/reconcile/jobs/daily/run", nil, true); got.Status != 403 {
		t.Errorf("run now of a job of acme and globex: %d, want 403", got.Status)
	}
	if got := c.post("/jobs/run", url.Values{"name": {"reconcile:daily"}}, true); got.Status != 403 {
		t.Errorf("run now of its schedule: %d, want 403", got.Status)
	}
	if n := written() - before; n != 0 {
		t.Errorf("refused uploads wrote %d rows", n)
	}
	if n := b.count(`SELECT count(*) FROM schedules WHERE run_requested_at IS NOT NULL`); n != 0 {
		t.Errorf("a refused run now requested %d runs", n)
	}
	if n := b.refusals(`actor = 'operator:acme-op'`); n != 6 {
		t.Errorf("%d refusals audited, want 6 (4 uploads, 2 run now)", n)
	}

	// Nothing of the account is listed or found: not its runs, counts or findings.
	for _, p := range []string{"/reconcile/runs", "/reconcile/findings", fmt.Sprintf("/reconcile/findings?run=%d", run)} {
		got := c.get(p)
		if got.Status != 200 {
			t.Errorf("%s: %d", p, got.Status)
		}
		mustNotContain(t, p, got.Body, "7345", "GLOBEX-SHARED", fmt.Sprintf(`href="/reconcile/runs/%d"`, run))
	}
	for _, p := range []string{"/api/v1/reconcile/runs", "/api/v1/reconcile/findings"} {
		got := c.api(p, tok)
		mustNotContain(t, p, got.Body, "7345", "GLOBEX-SHARED")
	}
	if got := c.get(fmt.Sprintf("/reconcile/runs/%d", run)); got.Status != 404 {
		t.Errorf("run of the account: %d, want 404", got.Status)
	}
	if got := c.post(fmt.Sprintf("/reconcile/findings/%d/ignore", finding), url.Values{"reason_code": {"test_transaction"}, "note": {"x"}}, true); got.Status != 404 {
		t.Errorf("ignore a finding of the account: %d, want 404", got.Status)
	}
	// The job itself is listed (it shares acme), without a way around the refusal.
	mustContain(t, "recon page", c.get("/reconcile").Body, `id="recon-job-daily"`)

	// Only a "*" administrator sets the tenants: the acme admin is refused (403) even for acme.
	if got := b.signIn("acme-admin").post("/reconcile/channels/stripe", url.Values{"tenants": {"acme"}}, true); got.Status != 403 {
		t.Errorf("acme admin sets the tenants of an account of acme and globex: %d, want 403", got.Status)
	}
	root := b.signIn("root")
	if got := root.post("/reconcile/channels/stripe", url.Values{"tenants": {" , "}}, true); got.Status != 400 || !strings.Contains(got.Body, "tenants:") {
		t.Errorf("empty tenant list: %d", got.Status)
	}
	if got := root.post("/reconcile/channels/stripe", url.Values{"tenants": {"acme"}}, true); got.Status != 303 {
		t.Fatalf("root sets stripe to acme: %d %s", got.Status, got.Body)
	}
	mustContain(t, "channel accounts", root.get("/reconcile").Body, `id="channel-stripe"`, "<code>acme</code>")
	if n := b.count(`SELECT count(*) FROM audit_log WHERE actor = 'operator:root' AND action = 'reconcile.channel.set_tenants'`); n != 1 {
		t.Errorf("set_tenants audit rows: %d", n)
	}
	// Now acme's alone: the upload goes through, and the run is acme's to see.
	got := c.upload("/reconcile/upload", map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}, file)
	if got.Status != 303 || !strings.HasPrefix(got.Location, "/reconcile/runs/") {
		t.Fatalf("upload to an account of acme: %d %q", got.Status, got.Location)
	}
	if got := c.get(got.Location); got.Status != 200 {
		t.Errorf("own run: %d", got.Status)
	}
}
