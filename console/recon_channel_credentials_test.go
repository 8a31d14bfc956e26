package console

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// The recon job API and page show each job's fetcher: the channel's own for an account of a
// channel kind, url or file for a generic one (issue 34 item 6).
func TestReconJobs_ShowTheirFetcher(t *testing.T) {
	b := setup(t, func(c *Config) { c.Reconcile.Sources.Allow = []string{"https://bills.example.com"} })
	b.addOperator("root", access.RoleAdmin, "*")
	c := b.signIn("root")
	tok := b.token("root")
	if got := c.apiPost("/api/v1/reconcile/channels/stripe-acct/settings", tok, map[string]any{"kind": "stripe", "settings": map[string]any{}}); got.Status != 200 {
		t.Fatalf("settings: %d %s", got.Status, got.Body)
	}
	jobs := []map[string]any{
		{"name": "by-url", "channel": "generic-1", "format": "wechat", "source": "https://bills.example.com/{date}.csv"},
		{"name": "by-file", "channel": "generic-2", "format": "wechat", "source": "/data/{date}.csv"},
		{"name": "by-stripe", "channel": "stripe-acct", "format": "stripe"},
	}
	for _, j := range jobs {
		j["operations"], j["cron_spec"], j["time_zone"] = []string{"payment.charge"}, "0 6 * * *", "UTC"
		if got := c.apiPost("/api/v1/reconcile/jobs", tok, j); got.Status != 201 {
			t.Fatalf("%s: %d %s", j["name"], got.Status, got.Body)
		}
	}
	got := c.api("/api/v1/reconcile/jobs", tok)
	var list struct {
		Jobs []struct{ Name, Fetcher string }
	}
	if err := json.Unmarshal([]byte(got.Body), &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"by-url": "url", "by-file": "file", "by-stripe": "stripe"}
	for _, j := range list.Jobs {
		if want[j.Name] != j.Fetcher {
			t.Errorf("%s: fetcher %q, want %q", j.Name, j.Fetcher, want[j.Name])
		}
	}
	if page := c.get("/reconcile/jobs/by-stripe"); !strings.Contains(page.Body, `id="job-fetcher"><code>stripe</code>`) {
		t.Errorf("the job page does not show its fetcher")
	}
	if page := c.get("/reconcile"); !strings.Contains(page.Body, `<td class="fetcher"><code>url</code></td>`) {
		t.Errorf("the jobs list does not show their fetchers")
	}
}

// Issue 35 item 1: a source is checked against the allow-list when the job is saved, with a 4xx
// naming the rule — loopback ports, the metadata address, file URLs, numeric host forms.
func TestReconJobs_SourcesOffTheAllowListAreRefusedWhenSaved(t *testing.T) {
	b := setup(t, func(c *Config) { c.Reconcile.Sources.Allow = []string{"http://127.0.0.1:8090"} })
	b.addOperator("root", access.RoleAdmin, "*")
	tok := b.token("root")
	c := b.client()
	for _, src := range []string{
		"http://127.0.0.1:5432/{date}", "http://127.0.0.1:8080/metrics?d={date}", "http://169.254.169.254/latest/meta-data/{date}",
		"http://2130706433:8090/{date}", "http://0x7f000001:8090/{date}", "http://127.1:8090/{date}", "http://[::ffff:127.0.0.1]:8090/{date}",
		"http://localhost:8090/{date}", "file:///etc/passwd?{date}", "/etc/passwd?{date}", "/data/../etc/{date}", "gopher://x/{date}",
	} {
		got := c.apiPost("/api/v1/reconcile/jobs", tok, map[string]any{"name": "ssrf", "channel": "c", "format": "wechat", "source": src,
			"operations": []string{"payment.charge"}, "cron_spec": "0 6 * * *", "time_zone": "UTC"})
		if got.Status/100 != 4 || !strings.Contains(got.Body, "source:") {
			t.Errorf("%s: %d %s; want a 4xx naming the source's rule", src, got.Status, got.Body)
		}
		if strings.Contains(got.Body, "connection") || strings.Contains(got.Body, "dial") {
			t.Errorf("%s: the refusal reads like a dial error: %s", src, got.Body)
		}
	}
	ok := c.apiPost("/api/v1/reconcile/jobs", tok, map[string]any{"name": "paysim", "channel": "c", "format": "wechat",
		"source": "http://127.0.0.1:8090/statements/{date}", "operations": []string{"payment.charge"}, "cron_spec": "0 6 * * *", "time_zone": "UTC"})
	if ok.Status != 201 {
		t.Errorf("the allow-listed origin: %d %s", ok.Status, ok.Body)
	}
}

// Issue 35 item 1: local file sources are for * administrators only.
func TestReconJobs_FileSourcesAreForStarAdministratorsOnly(t *testing.T) {
	b := setup(t)
	b.addOperator("acme-admin", access.RoleAdmin, "acme")
	b.setChannel("acme-wx", "acme")
	tok := b.token("acme-admin")
	got := b.client().apiPost("/api/v1/reconcile/jobs", tok, map[string]any{"name": "local", "channel": "acme-wx", "format": "wechat",
		"source": "/data/{date}.csv", "operations": []string{"payment.charge"}, "cron_spec": "0 6 * * *", "time_zone": "UTC"})
	if got.Status != 403 || !strings.Contains(got.Body, "only administrators of every tenant (*) may name a local file") {
		t.Errorf("a tenant administrator's file source: %d %s", got.Status, got.Body)
	}
	if n := b.count(`SELECT count(*) FROM recon_jobs`); n != 0 {
		t.Errorf("%d jobs saved", n)
	}
}

// Issue 35 item 5: a source's query and user info are shown to * administrators only, its
// secrets to nobody: they are stored apart (sealed), "***" in their place, and an edit that
// sends the shown source back keeps them.
func TestReconJobs_SourceSecretsAreKeptApartAndNeverShown(t *testing.T) {
	b := setup(t, func(c *Config) { c.Reconcile.Sources.Allow = []string{"https://bills.example.com"} })
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("acme-viewer", access.RoleViewer, "acme")
	b.addOperator("acme-admin", access.RoleAdmin, "acme")
	b.setChannel("acme-wx", "acme")
	const secret = "tok3n-S3CRET-value"
	src := "https://reader:pa55w0rd@bills.example.com/bills/{date}?format=wechat&access_token=" + secret
	got := b.client().apiPost("/api/v1/reconcile/jobs", b.token("root"), map[string]any{"name": "secret-src", "channel": "acme-wx",
		"format": "wechat", "source": src, "operations": []string{"payment.charge"}, "cron_spec": "0 6 * * *", "time_zone": "UTC"})
	if got.Status != 201 || strings.Contains(got.Body, secret) || strings.Contains(got.Body, "pa55w0rd") {
		t.Fatalf("create: %d %s", got.Status, got.Body)
	}
	var stored string
	b.db.Raw(`SELECT source FROM recon_jobs WHERE name = 'secret-src'`).Scan(&stored)
	if stored != "https://***@bills.example.com/bills/{date}?format=wechat&access_token=***" {
		t.Errorf("stored source %q", stored)
	}
	if n := b.count(`SELECT count(*) FROM recon_jobs WHERE position(? in encode(source_secret, 'escape')) > 0`, secret); n != 0 {
		t.Errorf("the secret is stored in clear")
	}
	// What each is shown, on the API and the pages.
	star := b.client().api("/api/v1/reconcile/jobs", b.token("root"))
	if !strings.Contains(star.Body, `access_token=***`) || !strings.Contains(star.Body, "format=wechat") {
		t.Errorf("a * administrator sees %s", star.Body)
	}
	for _, name := range []string{"acme-viewer", "acme-admin"} {
		api := b.client().api("/api/v1/reconcile/jobs", b.token(name))
		page := b.signIn(name).get("/reconcile/jobs/secret-src")
		for what, body := range map[string]string{"API": api.Body, "page": page.Body} {
			if !strings.Contains(body, "https://bills.example.com/bills/{date}?…") || strings.Contains(body, "format=wechat") ||
				strings.Contains(body, "***") {
				t.Errorf("%s's %s shows the source as %s", name, what, body)
			}
		}
	}
	// A tenant administrator saves the job with the source as shown: the saved one stays.
	form := url.Values{"name": {"secret-src"}, "channel": {"acme-wx"}, "format": {"wechat"}, "source": {"https://bills.example.com/bills/{date}?…"},
		"cron_spec": {"0 7 * * *"}, "time_zone": {"UTC"}, "operations": {"payment.charge"}}
	if got := b.signIn("acme-admin").post("/reconcile/jobs/secret-src", form, true); got.Status != 303 {
		t.Fatalf("edit: %d %s", got.Status, truncate(got.Body, 300))
	}
	var after string
	b.db.Raw(`SELECT source FROM recon_jobs WHERE name = 'secret-src'`).Scan(&after)
	j, err := b.srv.recon.GetJob(t.Context(), "secret-src")
	if after != stored || err != nil || j.CronSpec != "0 7 * * *" {
		t.Errorf("after the edit: %q %+v %v", after, j, err)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE detail::text LIKE ? OR detail::text LIKE ?`, "%"+secret+"%", "%pa55w0rd%"); n != 0 {
		t.Errorf("%d audit rows hold the secret", n)
	}
}

// Issue 34 item 2: credentials are configured by * administrators only, never shown again after
// saving, and redacted in the audit log.
func TestChannelCredentials_StarAdministratorsOnlyNeverShownRedactedInAudit(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("acme-admin", access.RoleAdmin, "acme")
	b.setChannel("acme-stripe", "acme")
	root, acme := b.token("root"), b.token("acme-admin")
	c := b.client()
	if got := c.apiPost("/api/v1/reconcile/channels/acme-stripe/settings", acme, map[string]any{"kind": "stripe"}); got.Status != 403 {
		t.Errorf("a tenant administrator sets the kind: %d %s", got.Status, got.Body)
	}
	if got := c.apiPost("/api/v1/reconcile/channels/acme-stripe/settings", root, map[string]any{"kind": "stripe"}); got.Status != 200 {
		t.Fatalf("settings: %d %s", got.Status, got.Body)
	}
	const secret = "sk_live_SECRETKEY0123456789"
	if got := c.apiPost("/api/v1/reconcile/channels/acme-stripe/credentials/secret_key", acme, map[string]any{"value": secret}); got.Status != 403 {
		t.Errorf("a tenant administrator saves a credential: %d %s", got.Status, got.Body)
	}
	got := c.apiPost("/api/v1/reconcile/channels/acme-stripe/credentials/secret_key", root, map[string]any{"value": secret})
	if got.Status != 200 || strings.Contains(got.Body, secret) || !strings.Contains(got.Body, `"digest":`) {
		t.Fatalf("save: %d %s", got.Status, got.Body)
	}
	if got := c.apiPost("/api/v1/reconcile/channels/acme-stripe/credentials/secret_key", root, map[string]any{"value": "not-a-key"}); got.Status != 400 {
		t.Errorf("a value that cannot be a Stripe key: %d %s", got.Status, got.Body)
	}
	if got := c.api("/api/v1/reconcile/channels/acme-stripe", root); got.Status != 200 || strings.Contains(got.Body, secret) ||
		!strings.Contains(got.Body, `"name":"secret_key"`) {
		t.Errorf("read back: %d %s", got.Status, got.Body)
	}
	if got := c.api("/api/v1/reconcile/channels/acme-stripe", acme); got.Status != 200 || strings.Contains(got.Body, `"credentials"`) {
		t.Errorf("a tenant administrator reads the credentials' descriptions: %d %s", got.Status, got.Body)
	}
	if page := b.signIn("root").get("/reconcile"); strings.Contains(page.Body, secret) || !strings.Contains(page.Body, "secret_key ") {
		t.Errorf("the page shows the value, or not the credential")
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE detail::text LIKE ?`, "%"+secret+"%"); n != 0 {
		t.Errorf("%d audit rows hold the value", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.channel.credential' AND detail::jsonb->>'value' = '[redacted]'`); n != 1 {
		t.Errorf("%d redacted credential audit rows, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM channel_credentials WHERE position(? in encode(sealed, 'escape')) > 0`, secret); n != 0 {
		t.Errorf("the credential is stored in clear")
	}
	// The sealed value opens under the deployment's key (and the same secret's keyring).
	k, _ := reconcile.NewKeyring(testSecret)
	if k.KeyID() != testKeyring.KeyID() {
		t.Errorf("the keyring is not derived from the deployment secret alone")
	}
}
