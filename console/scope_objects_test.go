package console

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// TestObjectScopeMatrix is generated from the route table: every route whose path names an
// object (:id, :name) is called on an object of the caller's tenant (own), of another tenant
// (other) and of "*" (star), as a viewer, an operator and an administrator of acme and as an
// administrator of every tenant. A route whose object kind has no fixture here fails the test,
// so a new route cannot skip it.
//
// Expected, per the scope model (scope.go): below the route's role, 403. Otherwise, when the
// caller's tenants cover the object's, the handler runs (anything but 403, 404 and 5xx; the
// fixtures are in states where an action is refused for a reason of its own, e.g. a finding
// already resolved, so a run leaves them as they were). When they do not: 404 exactly like a
// missing id — except configuration (recon jobs, channel accounts) that the caller sees
// because it shares a tenant or is "*"'s: seen on GET, refused with 403 on an action.
//
// "*" objects: an operator of every tenant (operators), a channel account of "*" (recon jobs,
// runs, channel-level findings), the reclaimer's schedule (job runs), a bulk run over acme's
// and globex's keys; keys and replay requests have one tenant, so theirs is a key of a tenant
// (initech) that only "*" covers.
func TestObjectScopeMatrix(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	type actor struct {
		name  string
		role  access.Role
		star  bool
		c     *client
		token string
	}
	actors := []*actor{{name: "acme-viewer", role: access.RoleViewer}, {name: "acme-operator", role: access.RoleOperator},
		{name: "acme-admin", role: access.RoleAdmin}, {name: "root", role: access.RoleAdmin, star: true}}
	ops := map[string]*access.Operator{}
	for _, a := range actors {
		tenant := "acme"
		if a.star {
			tenant = "*"
		}
		ops[a.name] = b.addOperator(a.name, a.role, tenant)
	}
	requester := b.addOperator("requester", access.RoleOperator, "*")
	cases := []string{"own", "other", "star"}
	tenantOf := map[string]string{"own": "acme", "other": "globex", "star": "initech"}

	// Fixtures: ref[kind][case] (bulk runs per actor: only their creator sees one).
	ref := map[access.ObjectKind]map[string]string{}
	set := func(k access.ObjectKind, c, v string) {
		if ref[k] == nil {
			ref[k] = map[string]string{}
		}
		ref[k][c] = v
	}
	keys := map[string]int64{}
	for _, c := range cases {
		k := b.seedKey(tenantOf[c], "payment.charge", "matrix-"+c, `{"amount":100,"currency":"USD"}`, true)
		keys[c] = k.ID
		set(access.ObjKey, c, strconv.FormatInt(k.ID, 10))
		var ids []int64
		if err := b.db.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
			reason, preview, needs_approval, state) VALUES (?, ?, ?, 1, ?, ?, 'requester', 'matrix', 'a charge', false, 'executed')
			RETURNING id`, k.ID, k.Tenant, k.KeyDigest, []byte("matrix-"+c), requester.ID).Scan(&ids).Error; err != nil {
			t.Fatal(err)
		}
		set(access.ObjReplay, c, strconv.FormatInt(ids[0], 10))
	}
	channels := map[string]string{"own": "acme-pay", "other": "globex-pay", "star": "star-pay"}
	b.setChannel("acme-pay", "acme")
	b.setChannel("globex-pay", "globex")
	b.setChannel("star-pay", "*")
	for _, c := range cases {
		ch := channels[c]
		if _, err := b.srv.recon.CreateJob(ctx, reconcile.JobSpec{Name: "job-" + c, Channel: ch, Format: "stripe",
			Source: "/data/{date}.csv", Operations: []string{"payment.charge"}, CronSpec: "0 6 * * *", TimeZone: "UTC", Enabled: true}); err != nil {
			t.Fatal(err)
		}
		set(access.ObjReconJob, c, "job-"+c)
		set(access.ObjChannel, c, ch)
		run := b.seedReconRun(ch)
		set(access.ObjReconRun, c, strconv.FormatInt(run, 10))
		// Findings, already resolved: about the case's key, and for "*" about a "*" statement.
		var keyID *int64
		if c != "star" {
			id := keys[c]
			keyID = &id
		}
		var fids []int64
		if err := b.db.Raw(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id, detail, state)
			VALUES (?, ?, ?, '2024-03-01', 'CHANNEL_ONLY', ?, ?, '{}', 'resolved') RETURNING id`,
			run, run, ch, "matrix:"+c, keyID).Scan(&fids).Error; err != nil {
			t.Fatal(err)
		}
		set(access.ObjFinding, c, strconv.FormatInt(fids[0], 10))
		sched := "reconcile:job-" + c
		if c == "star" {
			sched = "reclaim"
		}
		var rids []int64
		if err := b.db.Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, status, deadline_at, finished_at, stats)
			VALUES (?, 'x', 'schedule', 'r1', 'succeeded', now(), now(), '{}') RETURNING id`, sched).Scan(&rids).Error; err != nil {
			t.Fatal(err)
		}
		set(access.ObjJobRun, c, strconv.FormatInt(rids[0], 10))
		target := b.addOperator("target-"+c, access.RoleViewer, map[string]string{"own": "acme", "other": "globex", "star": "*"}[c])
		set(access.ObjOperator, c, strconv.FormatInt(target.ID, 10))
	}
	// Bulk runs of findings, done, over findings of the case's tenant ("*": every tenant's).
	for _, c := range cases {
		var ids []int64
		if err := b.db.Raw(`INSERT INTO finding_bulk_runs (action, reason_code, filter, operator_id, operator, tenants, state, total, processed)
			VALUES ('ignore', 'test_transaction', '{}', ?, 'requester', ARRAY[?]::text[], 'done', 1, 1) RETURNING id`,
			requester.ID, map[string]string{"own": "acme", "other": "globex", "star": "*"}[c]).Scan(&ids).Error; err != nil {
			t.Fatal(err)
		}
		set(access.ObjFindingBulk, c, strconv.FormatInt(ids[0], 10))
	}
	bulk := map[string]map[string]string{} // actor → case → run id
	for _, a := range actors {
		bulk[a.name] = map[string]string{}
		for _, c := range cases {
			var ids []int64
			if err := b.db.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, state, total, processed)
				VALUES (?, ?, 'state=completed', 'done', 1, 1) RETURNING id`, ops[a.name].ID, a.name).Scan(&ids).Error; err != nil {
				t.Fatal(err)
			}
			items := map[string][]int64{"own": {keys["own"]}, "other": {keys["other"]}, "star": {keys["own"], keys["other"]}}[c]
			for i, k := range items {
				b.exec(`INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted) VALUES (?, ?, ?, 1, 'completed', 'refused')`,
					ids[0], i+1, k)
			}
			bulk[a.name][c] = strconv.FormatInt(ids[0], 10)
		}
	}
	for _, a := range actors {
		a.c = b.signIn(a.name)
		a.token = b.token(a.name)
	}

	// One form for every action: each handler finds what it needs, or refuses it for a reason
	// of its own once the scope check has passed (an empty tenant list, a role that is no role).
	form := url.Values{"reason": {"matrix"}, "note": {"n"}, "reason_code": {"x"}, "hold": {"1"}, "enabled": {"x"},
		"role": {"bogus"}, "tenants": {" , "}, "disabled": {"false"}, "label": {"matrix"}}
	body := map[string]any{"reason": "matrix", "note": "n", "reason_code": "x"}

	// Routes only administrators of every tenant may act on, whatever the object's tenants.
	starOnlyRoutes := map[string]bool{"/reconcile/channels/:name/settings": true, "/reconcile/channels/:name/credentials": true,
		"/api/v1/reconcile/channels/:name/settings": true, "/api/v1/reconcile/channels/:name/credentials/:credential": true,
		"/api/v1/reconcile/channels/:name/credentials/:credential/delete": true}
	checks, routes := 0, 0
	kinds := map[access.ObjectKind]bool{}
	for _, rt := range b.srv.routes() {
		kind, param, ok, err := routeObject(rt.Path)
		if err != nil {
			t.Errorf("route %s %s: %v", rt.Method, rt.Path, err)
			continue
		}
		if !ok {
			continue
		}
		if kind != access.ObjBulkRun && ref[kind] == nil {
			t.Errorf("route %s %s names a %s, which has no fixture in this test", rt.Method, rt.Path, kind)
			continue
		}
		routes++
		kinds[kind] = true
		act := rt.Method != "GET"
		for _, a := range actors {
			for _, c := range cases {
				id := ref[kind][c]
				if kind == access.ObjBulkRun {
					id = bulk[a.name][c]
				}
				path := strings.Replace(rt.Path, ":"+param, url.PathEscape(id), 1)
				var got resp
				switch {
				case rt.Kind == kindAPI && !act:
					got = a.c.api(path, a.token)
				case rt.Kind == kindAPI:
					got = a.c.apiPost(path, a.token, body)
				case !act:
					got = a.c.get(path)
				default:
					f := url.Values{}
					for k, v := range form {
						f[k] = v
					}
					got = a.c.post(path, f, true)
				}
				checks++
				// The expectation, from the model (not from the code under test).
				covered := a.star || c == "own"
				want := "allowed"
				switch {
				case a.role < rt.Min:
					want = "403"
				case starOnlyRoutes[rt.Path] && !a.star && covered:
					want = "403" // an account's fetcher and credentials: * administrators only
				case covered:
				case kind.IsConfig() && c == "star":
					if act {
						want = "403"
					}
				default:
					want = "404"
				}
				ok := strconv.Itoa(got.Status) == want
				if want == "allowed" {
					ok = got.Status != 403 && got.Status != 404 && got.Status < 500
				}
				if !ok {
					t.Errorf("%s %s as %s on the %s %s: %d, want %s (%s)", rt.Method, rt.Path, a.name, c, kind, got.Status, want,
						truncate(got.Body, 160))
				}
				if want == "404" && act && rt.Kind == kindPage {
					// Refused actions leave an audit row.
					if n := b.refusals(`actor = ? AND action = ?`, ops[a.name].Actor(), rt.Method+" "+rt.Path+"_refused"); n == 0 {
						t.Errorf("%s %s as %s on the %s %s: refusal not audited", rt.Method, rt.Path, a.name, c, kind)
					}
				}
			}
		}
	}
	t.Logf("object scope matrix: %d routes naming %d kinds of object × %d roles × %d tenants = %d checks",
		routes, len(kinds), len(actors), len(cases), checks)
	if routes < 30 || checks != routes*len(actors)*len(cases) {
		t.Fatalf("%d routes, %d checks: the route table names more objects than that", routes, checks)
	}
	// The fixtures were left as they were: nothing was approved, resolved or started.
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state <> 'resolved'`) + b.count(`SELECT count(*) FROM replay_requests WHERE state <> 'executed'`) +
		b.count(`SELECT count(*) FROM replay_bulk_runs WHERE state <> 'done'`); n != 0 {
		t.Errorf("%d fixtures changed state", n)
	}
}

// TestObjectScope_HostileNamesAreNotFound: a NUL byte, invalid UTF-8 or an overlong name where
// an object is named answers like a missing object, never 500.
func TestObjectScope_HostileNamesAreNotFound(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*")
	c := b.signIn("root")
	for _, name := range []string{"%00", "a%00b", "%ff%fe", strings.Repeat("x", 300)} {
		if got := c.get("/reconcile/jobs/" + name); got.Status != 404 {
			t.Errorf("recon job %q: %d, want 404", name, got.Status)
		}
		if got := c.post("/reconcile/channels/"+name, url.Values{"tenants": {"acme"}}, true); got.Status != 404 {
			t.Errorf("channel %q: %d, want 404", name, got.Status)
		}
	}
}
