package console

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// A name taken by an object outside the operator's scope answers a generic refusal: acme's
// administrator learns that "globex-secret-job" or "gina" cannot be used, not that globex has a
// recon job or an operator of that name; an administrator who can see the object is told it
// exists (issue 35 item 6).
func TestNameConflicts_OutOfScopeAnswerGenerically(t *testing.T) {
	t.Parallel()
	b := newBundle(t, func(c *Config) { c.Reconcile.Sources.Allow = []string{"https://bills.example"} })
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("acme-admin", access.RoleAdmin, "acme")
	b.addOperator("globex-admin", access.RoleAdmin, "globex")
	b.addOperator("gina", access.RoleViewer, "globex")
	b.setChannel("stripe-globex", "globex")
	b.setChannel("stripe-acme", "acme")
	if _, err := b.srv.recon.CreateJob(context.Background(), reconcile.JobSpec{Name: "globex-secret-job", Channel: "stripe-globex",
		Format: "stripe", Source: "https://bills.example/{date}", Operations: []string{"payment.charge"}, CronSpec: "0 6 * * *",
		TimeZone: "UTC", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	job := func(channel string) url.Values {
		return url.Values{"name": {"globex-secret-job"}, "channel": {channel}, "format": {"stripe"},
			"source": {"https://bills.example/{date}"}, "cron_spec": {"0 6 * * *"}, "time_zone": {"UTC"}, "operations": {"payment.charge"}}
	}
	operator := func(tenant string) url.Values {
		return url.Values{"name": {"GINA"}, "password": {"a long enough password"}, "role": {"viewer"}, "tenants": {tenant}}
	}
	for _, tc := range []struct {
		who, path  string
		form       url.Values
		status     int
		say, never string
	}{
		{"acme-admin", "/reconcile/jobs", job("stripe-acme"), 400, "this name cannot be used", "exists"},
		{"globex-admin", "/reconcile/jobs", job("stripe-globex"), 400, `a recon job named &#34;globex-secret-job&#34; exists`, ""},
		{"root", "/reconcile/jobs", job("stripe-acme"), 400, `a recon job named &#34;globex-secret-job&#34; exists`, ""},
		{"acme-admin", "/admin/operators", operator("acme"), 400, "this name cannot be used", "already exists"},
		{"globex-admin", "/admin/operators", operator("globex"), 409, "already exists", ""},
		{"root", "/admin/operators", operator("acme"), 409, "already exists", ""},
	} {
		got := b.signIn(tc.who).post(tc.path, tc.form, true)
		if got.Status != tc.status || !strings.Contains(got.Body, tc.say) || tc.never != "" && strings.Contains(got.Body, tc.never) {
			t.Errorf("%s posts %s with a taken name: %d, want %d saying %q and never %q\n%s", tc.who, tc.path, got.Status, tc.status,
				tc.say, tc.never, truncate(got.Body, 300))
		}
	}
	if n := b.count(`SELECT count(*) FROM recon_jobs`) + b.count(`SELECT count(*) FROM operators WHERE lower(name) = 'gina'`); n != 2 {
		t.Errorf("%d jobs and ginas, want the one of each there was", n)
	}
}
