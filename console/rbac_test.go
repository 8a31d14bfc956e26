package console

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
)

// matrixCase is one route of the role × route matrix: the expected status for an anonymous
// caller, a viewer, an operator and an admin (all with access to the key's tenant).
type matrixCase struct {
	path   string // concrete path
	form   url.Values
	expect [4]int // anonymous, viewer, operator, admin
}

// TestRoleRouteMatrix calls every route of the route table as every role and checks the
// status. Pages without a session redirect to /login (303); the API answers 401; a role below
// the route's minimum gets 403.
func TestRoleRouteMatrix(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "acme")
	b.addOperator("o", access.RoleOperator, "acme")
	b.addOperator("a", access.RoleAdmin, "*")
	target := b.addOperator("target", access.RoleViewer, "acme")
	k := b.seedKey("acme", "payment.charge", "k-1", `{"amount":100,"currency":"USD"}`, true)
	id := strconv.FormatInt(k.ID, 10)
	tid := strconv.FormatInt(target.ID, 10)
	// A replay request of the key, decided already (approving it again is a 409 for any operator).
	rq := b.seedFailed("acme", "payment.charge-rq", `{"amount":100,"currency":"USD"}`, true)
	var rids []int64
	if err := b.db.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
		reason, preview, needs_approval, state) VALUES (?, 'acme', ?, 1, 'x', ?, 'target', 'matrix', 'a charge', false, 'executed')
		RETURNING id`, rq.ID, rq.KeyDigest, target.ID).Scan(&rids).Error; err != nil {
		t.Fatal(err)
	}
	rid := strconv.FormatInt(rids[0], 10)
	// A recon job on a channel account of acme (so within every caller's tenants), a run and a
	// finding already resolved (acting on it again is a 409).
	b.seedReconJob("daily")
	b.setChannel("stripe", "acme")
	// A schedule and one finished run of the recon job's schedule, as a daemon would have left them.
	if err := daemon.SaveSchedule(context.Background(), b.db, daemon.ScheduleSpec{Name: "reclaim", Job: "reclaim", Spec: "@every 1m"}); err != nil {
		t.Fatal(err)
	}
	var runIDs []int64
	if err := b.db.Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, status, deadline_at, finished_at, stats)
		VALUES ('reconcile:daily', 'reconcile', 'schedule', 'r1', 'succeeded', now(), now(), '{"findings": 3}') RETURNING id`).Scan(&runIDs).Error; err != nil {
		t.Fatal(err)
	}
	runID := strconv.FormatInt(runIDs[0], 10)
	reconRun := b.seedReconRun("stripe")
	closed := b.seedFinding(reconRun, "CHANNEL_ONLY", "txn:matrix", nil, `{"channel_status":"success"}`)
	b.exec(`UPDATE discrepancies SET state = 'resolved' WHERE id = ?`, closed)
	rrid, fid := strconv.FormatInt(reconRun, 10), strconv.FormatInt(closed, 10)
	jobForm := url.Values{"name": {"daily"}, "channel": {"stripe"}, "format": {"stripe"}, "source": {"/data/{date}.csv"},
		"cron_spec": {"0 6 * * *"}, "time_zone": {"UTC"}, "operations": {"payment.charge"}}
	newJob := url.Values{"name": {"matrix-job"}, "channel": {"stripe"}, "format": {"stripe"}, "source": {"/data/{date}.csv"},
		"cron_spec": {"0 6 * * *"}, "time_zone": {"UTC"}, "operations": {"payment.charge"}}
	policy := url.Values{"operation": {"*"}, "state": {"completed"}, "keep_response": {"3d"}, "keep_key": {"30d"}}

	const R, F, U = 303, 403, 401 // redirect, forbidden, unauthorized
	cases := map[string]matrixCase{
		"GET /healthz":                     {"/healthz", nil, [4]int{200, 200, 200, 200}},
		"GET /readyz":                      {"/readyz", nil, [4]int{200, 200, 200, 200}},
		"GET /metrics":                     {"/metrics", nil, [4]int{200, 200, 200, 200}},
		"GET /static/*file":                {"/static/style.css", nil, [4]int{200, 200, 200, 200}},
		"GET /login":                       {"/login", nil, [4]int{200, R, R, R}},
		"POST /login":                      {"/login", url.Values{"name": {"x"}, "password": {"y"}}, [4]int{F, F, F, F}}, // no sign-in form cookie: refused
		"GET /login/sso":                   {"/login/sso", nil, [4]int{404, 404, 404, 404}},                              // single sign-on is off here (sso_test.go)
		"GET /login/sso/callback":          {"/login/sso/callback", nil, [4]int{404, 404, 404, 404}},                     // likewise
		"POST /logout":                     {"/logout", nil, [4]int{R, R, R, R}},
		"POST /settings/time-zone":         {"/settings/time-zone", url.Values{"time_zone": {"UTC"}}, [4]int{R, R, R, R}},
		"POST /settings/language":          {"/settings/language", url.Values{"lang": {"zh-CN"}}, [4]int{R, R, R, R}},
		"POST /login/language":             {"/login/language", url.Values{"lang": {"zh-CN"}}, [4]int{F, F, F, F}}, // no sign-in form cookie: refused
		"GET /":                            {"/", nil, [4]int{R, 200, 200, 200}},
		"GET /keys":                        {"/keys", nil, [4]int{R, 200, 200, 200}},
		"POST /keys/find":                  {"/keys/find", url.Values{"tenant": {"acme"}, "operation": {"payment.charge"}, "key": {"k-1"}}, [4]int{R, R, R, R}},
		"GET /keys/:id":                    {"/keys/" + id, nil, [4]int{R, 200, 200, 200}},
		"POST /keys/:id/reveal":            {"/keys/" + id + "/reveal", nil, [4]int{R, F, 200, 200}},
		"POST /keys/:id/check":             {"/keys/" + id + "/check", nil, [4]int{R, F, 200, 200}},
		"GET /audit":                       {"/audit", nil, [4]int{R, F, F, 200}},
		"GET /admin/operators":             {"/admin/operators", nil, [4]int{R, F, F, 200}},
		"POST /admin/operators":            {"/admin/operators", url.Values{"name": {"new-one"}, "password": {"a long enough password"}, "role": {"viewer"}, "tenants": {"acme"}}, [4]int{R, F, F, R}},
		"POST /admin/operators/:id/access": {"/admin/operators/" + tid + "/access", url.Values{"role": {"operator"}, "tenants": {"acme,globex"}}, [4]int{R, F, F, R}},
		"POST /admin/operators/:id/status": {"/admin/operators/" + tid + "/status", url.Values{"disabled": {"true"}}, [4]int{R, F, F, R}},
		"POST /admin/operators/:id/tokens": {"/admin/operators/" + tid + "/tokens", url.Values{"label": {"ci"}}, [4]int{R, F, F, 200}},
		"GET /api/v1/keys":                 {"/api/v1/keys", nil, [4]int{U, 200, 200, 200}},
		"GET /api/v1/keys/:id":             {"/api/v1/keys/" + id, nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/keys/find":           {"/api/v1/keys/find", url.Values{"key": {"k-1"}}, [4]int{U, 200, 200, 200}},
		// Replays: operators and admins; a confirmation without a token is a 400 once the role passed.
		"GET /keys/:id/replay":             {"/keys/" + id + "/replay", nil, [4]int{R, F, 200, 200}},
		"POST /keys/:id/replay":            {"/keys/" + id + "/replay", url.Values{"reason": {"x"}}, [4]int{R, F, 400, 400}},
		"POST /keys/:id/final":             {"/keys/" + id + "/final", url.Values{"reason": {"x"}}, [4]int{R, F, F, 400}},
		"POST /keys/:id/release":           {"/keys/" + id + "/release", url.Values{"reason": {"x"}}, [4]int{R, F, F, 400}},
		"GET /replays":                     {"/replays", nil, [4]int{R, F, 200, 200}},
		"GET /replays/:id":                 {"/replays/" + rid, nil, [4]int{R, F, 200, 200}},
		"POST /replays/:id/approve":        {"/replays/" + rid + "/approve", nil, [4]int{R, F, 409, 409}},
		"POST /replays/bulk":               {"/replays/bulk", url.Values{"tenant": {"no-such-tenant"}}, [4]int{R, F, 400, 400}},
		"GET /replays/bulk/:id":            {"/replays/bulk/999999", nil, [4]int{R, F, 404, 404}},
		"GET /replays/bulk/:id/progress":   {"/replays/bulk/999999/progress", nil, [4]int{R, F, 404, 404}},
		"POST /replays/bulk/start":         {"/replays/bulk/start", url.Values{"reason": {"x"}, "plan": {"b1|x"}, "token": {"x"}}, [4]int{R, F, 400, 400}},
		"GET /api/v1/keys/:id/replay":      {"/api/v1/keys/" + id + "/replay", nil, [4]int{U, F, 200, 200}},
		"POST /api/v1/keys/:id/replay":     {"/api/v1/keys/" + id + "/replay", url.Values{"reason": {"x"}}, [4]int{U, F, 400, 400}},
		"GET /api/v1/keys/:id/final":       {"/api/v1/keys/" + id + "/final", nil, [4]int{U, F, F, 200}},
		"POST /api/v1/keys/:id/final":      {"/api/v1/keys/" + id + "/final", url.Values{"reason": {"x"}}, [4]int{U, F, F, 400}},
		"POST /api/v1/keys/:id/release":    {"/api/v1/keys/" + id + "/release", url.Values{"reason": {"x"}}, [4]int{U, F, F, 400}},
		"GET /api/v1/replays/:id":          {"/api/v1/replays/" + rid, nil, [4]int{U, F, 200, 200}},
		"POST /api/v1/replays/:id/approve": {"/api/v1/replays/" + rid + "/approve", url.Values{}, [4]int{U, F, 409, 409}},
		"POST /api/v1/replays/bulk":        {"/api/v1/replays/bulk", url.Values{"tenant": {"no-such-tenant"}}, [4]int{U, F, 400, 400}},
		"GET /api/v1/replays/bulk/:id":     {"/api/v1/replays/bulk/999999", nil, [4]int{U, F, 404, 404}},
		"POST /api/v1/replays/bulk/start":  {"/api/v1/replays/bulk/start", url.Values{"reason": {"x"}, "plan": {"b1|x"}, "token": {"x"}}, [4]int{U, F, 400, 400}},
		// The daemon: everyone signed in reads it; operators run a job now; admins pause and resume.
		"GET /consumers":            {"/consumers?key=pay_1", nil, [4]int{R, 200, 200, 200}},
		"GET /jobs":                 {"/jobs", nil, [4]int{R, 200, 200, 200}},
		"GET /jobs/runs":            {"/jobs/runs", nil, [4]int{R, 200, 200, 200}},
		"GET /jobs/runs/:id":        {"/jobs/runs/" + runID, nil, [4]int{R, 200, 200, 200}},
		"POST /jobs/run":            {"/jobs/run", url.Values{"name": {"reconcile:daily"}}, [4]int{R, F, R, R}},
		"POST /jobs/pause":          {"/jobs/pause", url.Values{"name": {"reconcile:daily"}}, [4]int{R, F, F, R}},
		"POST /jobs/resume":         {"/jobs/resume", url.Values{"name": {"reconcile:daily"}}, [4]int{R, F, F, R}},
		"GET /api/v1/jobs":          {"/api/v1/jobs", nil, [4]int{U, 200, 200, 200}},
		"GET /api/v1/jobs/runs/:id": {"/api/v1/jobs/runs/" + runID, nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/jobs/run":     {"/api/v1/jobs/run", url.Values{"name": {"reconcile:daily"}}, [4]int{U, F, 202, 202}},
		"POST /api/v1/jobs/pause":   {"/api/v1/jobs/pause", url.Values{"name": {"reconcile:daily"}}, [4]int{U, F, F, 202}},
		"POST /api/v1/jobs/resume":  {"/api/v1/jobs/resume", url.Values{"name": {"reconcile:daily"}}, [4]int{U, F, F, 202}},
		// Retention: everyone reads; admins change policies, the floor and legal holds.
		"POST /keys/:id/hold":             {"/keys/" + id + "/hold", url.Values{"hold": {"1"}, "reason": {"matrix"}}, [4]int{R, F, F, R}},
		"GET /retention":                  {"/retention", nil, [4]int{R, 200, 200, 200}},
		"GET /retention/preview":          {"/retention/preview?operation=payment.charge", nil, [4]int{R, F, F, 200}}, // counts every tenant's keys: "*" only
		"POST /retention/policies":        {"/retention/policies", policy, [4]int{R, F, F, R}},
		"POST /retention/policies/delete": {"/retention/policies/delete", url.Values{"operation": {"nope"}, "state": {"completed"}}, [4]int{R, F, F, 404}},
		"POST /retention/floor":           {"/retention/floor", url.Values{"client_retry": {"24h"}, "backfill": {"72h"}, "reconciliation_lag": {"48h"}}, [4]int{R, F, F, R}},
		"GET /api/v1/retention/policies":  {"/api/v1/retention/policies", nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/retention/policies": {"/api/v1/retention/policies", policy, [4]int{U, F, F, 200}},
		"GET /api/v1/retention/preview":   {"/api/v1/retention/preview", nil, [4]int{U, F, F, 200}},
		"GET /api/v1/retention/purges":    {"/api/v1/retention/purges", nil, [4]int{U, F, F, 200}},
		// Reconciliation: everyone reads; operators act on findings, run jobs now and upload;
		// admins create, edit, enable and disable jobs.
		"GET /reconcile":                     {"/reconcile", nil, [4]int{R, 200, 200, 200}},
		"GET /reconcile/next-runs":           {"/reconcile/next-runs?cron_spec=0+6+*+*+*", nil, [4]int{R, 200, 200, 200}},
		"POST /reconcile/jobs":               {"/reconcile/jobs", newJob, [4]int{R, F, F, R}},
		"GET /reconcile/jobs/:name":          {"/reconcile/jobs/daily", nil, [4]int{R, 200, 200, 200}},
		"POST /reconcile/jobs/:name":         {"/reconcile/jobs/daily", jobForm, [4]int{R, F, F, R}},
		"POST /reconcile/jobs/:name/enabled": {"/reconcile/jobs/daily/enabled", url.Values{"enabled": {"1"}}, [4]int{R, F, F, R}},
		"POST /reconcile/jobs/:name/run":     {"/reconcile/jobs/daily/run", nil, [4]int{R, F, R, R}},
		"POST /reconcile/upload":             {"/reconcile/upload", url.Values{"channel": {"stripe"}}, [4]int{R, F, 400, 400}}, // no file
		"POST /reconcile/channels":           {"/reconcile/channels", url.Values{"channel": {"paypal"}, "tenants": {"acme"}}, [4]int{R, F, F, R}},
		"POST /reconcile/channels/:name":     {"/reconcile/channels/stripe", url.Values{"tenants": {"acme"}}, [4]int{R, F, F, R}},
		// An account's fetcher and credentials: * administrators only (a generic account takes none: 400).
		"POST /reconcile/channels/:name/settings": {"/reconcile/channels/stripe/settings", url.Values{"kind": {"generic"}, "settings": {"{}"}},
			[4]int{R, F, F, R}},
		"POST /reconcile/channels/:name/credentials": {"/reconcile/channels/stripe/credentials", url.Values{"credential": {"secret_key"},
			"value": {"sk_test_matrix"}}, [4]int{R, F, F, 400}},
		"GET /api/v1/reconcile/channels/:name":           {"/api/v1/reconcile/channels/stripe", nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/reconcile/channels/:name/settings": {"/api/v1/reconcile/channels/stripe/settings", url.Values{"kind": {"generic"}}, [4]int{U, F, F, 200}},
		"POST /api/v1/reconcile/channels/:name/credentials/:credential": {"/api/v1/reconcile/channels/stripe/credentials/secret_key",
			url.Values{"value": {"sk_test_matrix"}}, [4]int{U, F, F, 400}},
		"POST /api/v1/reconcile/channels/:name/credentials/:credential/delete": {"/api/v1/reconcile/channels/stripe/credentials/secret_key/delete",
			nil, [4]int{U, F, F, 204}},
		"GET /reconcile/runs":          {"/reconcile/runs", nil, [4]int{R, 200, 200, 200}},
		"GET /reconcile/runs/:id":      {"/reconcile/runs/" + rrid, nil, [4]int{R, 200, 200, 200}},
		"GET /reconcile/runs/:id/line": {"/reconcile/runs/" + rrid + "/line", nil, [4]int{R, 400, 400, 400}},
		"GET /reconcile/findings":      {"/reconcile/findings", nil, [4]int{R, 200, 200, 200}},
		"POST /reconcile/findings/:id/resolve": {"/reconcile/findings/" + fid + "/resolve", url.Values{"reason_code": {"refunded_at_channel"}, "note": {"n"}},
			[4]int{R, F, 409, 409}},
		"POST /reconcile/findings/:id/ignore":  {"/reconcile/findings/" + fid + "/ignore", url.Values{"reason_code": {"test_transaction"}, "note": {"n"}}, [4]int{R, F, 409, 409}},
		"POST /reconcile/findings/:id/recover": {"/reconcile/findings/" + fid + "/recover", url.Values{"note": {"n"}}, [4]int{R, F, 409, 409}},
		// A reason not of the vocabulary: the form comes back refused (400) once the role passed.
		"POST /reconcile/findings/:id/reopen": {"/reconcile/findings/" + fid + "/reopen", url.Values{"reason_code": {"x"}}, [4]int{R, F, 400, 400}},
		"GET /reconcile/findings/export":      {"/reconcile/findings/export?format=csv", nil, [4]int{R, 200, 200, 200}},
		// Bulk runs of findings: operators; an unknown action is a 400, an unknown run a 404.
		"GET /reconcile/findings/bulk":              {"/reconcile/findings/bulk", nil, [4]int{R, F, 200, 200}},
		"POST /reconcile/findings/bulk":             {"/reconcile/findings/bulk", url.Values{"action": {"bogus"}, "scope": {"all"}}, [4]int{R, F, 400, 400}},
		"POST /reconcile/findings/bulk/start":       {"/reconcile/findings/bulk/start", url.Values{"action": {"bogus"}, "scope": {"all"}}, [4]int{R, F, 400, 400}},
		"GET /reconcile/findings/bulk/:id":          {"/reconcile/findings/bulk/999999", nil, [4]int{R, F, 404, 404}},
		"POST /reconcile/findings/bulk/:id/approve": {"/reconcile/findings/bulk/999999/approve", nil, [4]int{R, F, 404, 404}},
		"POST /reconcile/findings/bulk/:id/reject":  {"/reconcile/findings/bulk/999999/reject", nil, [4]int{R, F, 404, 404}},
		"GET /api/v1/reconcile/jobs":                {"/api/v1/reconcile/jobs", nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/reconcile/jobs": {"/api/v1/reconcile/jobs", url.Values{"name": {"api-job"}, "channel": {"stripe"}, "format": {"stripe"},
			"source": {"/data/{date}.csv"}, "cron_spec": {"0 6 * * *"}, "time_zone": {"UTC"}, "operations": {"payment.charge"}}, [4]int{U, F, F, 201}},
		"GET /api/v1/reconcile/runs":        {"/api/v1/reconcile/runs", nil, [4]int{U, 200, 200, 200}},
		"GET /api/v1/reconcile/runs/:id":    {"/api/v1/reconcile/runs/" + rrid, nil, [4]int{U, 200, 200, 200}},
		"GET /api/v1/reconcile/findings":    {"/api/v1/reconcile/findings", nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/reconcile/statements": {"/api/v1/reconcile/statements", url.Values{"channel": {"stripe"}}, [4]int{U, F, 400, 400}},
		"POST /api/v1/reconcile/findings/:id/resolve": {"/api/v1/reconcile/findings/" + fid + "/resolve", url.Values{"reason_code": {"refunded_at_channel"}, "note": {"n"}},
			[4]int{U, F, 409, 409}},
		"POST /api/v1/reconcile/findings/:id/ignore":  {"/api/v1/reconcile/findings/" + fid + "/ignore", url.Values{"reason_code": {"test_transaction"}, "note": {"n"}}, [4]int{U, F, 409, 409}},
		"POST /api/v1/reconcile/findings/:id/recover": {"/api/v1/reconcile/findings/" + fid + "/recover", url.Values{"note": {"n"}}, [4]int{U, F, 409, 409}},
		"POST /api/v1/reconcile/findings/:id/reopen": {"/api/v1/reconcile/findings/" + fid + "/reopen", url.Values{"reason_code": {"x"}},
			[4]int{U, F, 400, 400}},
		"GET /api/v1/dashboard":                            {"/api/v1/dashboard", nil, [4]int{U, 200, 200, 200}},
		"GET /api/v1/reconcile/findings/export":            {"/api/v1/reconcile/findings/export?format=csv", nil, [4]int{U, 200, 200, 200}},
		"POST /api/v1/reconcile/findings/bulk":             {"/api/v1/reconcile/findings/bulk", url.Values{"action": {"bogus"}, "preview": {"true"}}, [4]int{U, F, 400, 400}},
		"GET /api/v1/reconcile/findings/bulk/:id":          {"/api/v1/reconcile/findings/bulk/999999", nil, [4]int{U, F, 404, 404}},
		"POST /api/v1/reconcile/findings/bulk/:id/approve": {"/api/v1/reconcile/findings/bulk/999999/approve", nil, [4]int{U, F, 404, 404}},
		"POST /api/v1/reconcile/findings/bulk/:id/reject":  {"/api/v1/reconcile/findings/bulk/999999/reject", nil, [4]int{U, F, 404, 404}},
	}

	roles := []string{"", "v", "o", "a"}
	tokens := map[string]string{}
	for _, name := range roles[1:] {
		tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, name, "matrix", 0)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
	}
	seen := map[string]bool{}
	for _, rt := range b.srv.routes() {
		name := rt.Method + " " + rt.Path
		seen[name] = true
		tc, ok := cases[name]
		if !ok {
			t.Errorf("route %s is not in the role × route matrix", name)
			continue
		}
		for i, role := range roles {
			var got resp
			// A fresh session per call: logout and access changes end sessions.
			c := b.client()
			if role != "" {
				c = b.signIn(role)
			}
			switch {
			case rt.Kind == kindAPI && rt.Method == "GET":
				got = c.api(tc.path, tokens[role])
			case rt.Kind == kindAPI:
				body := map[string]any{}
				for k, v := range tc.form {
					body[k] = v[0]
				}
				if strings.HasSuffix(rt.Path, "/reconcile/jobs") {
					body["operations"] = []string{"payment.charge"}
				}
				if strings.HasSuffix(rt.Path, "/replays/bulk") {
					body = map[string]any{"filter": map[string]string{"tenant": tc.form.Get("tenant")}}
				}
				got = c.apiPost(tc.path, tokens[role], body)
			case rt.Method == "GET":
				got = c.get(tc.path)
			default:
				form := url.Values{}
				for k, v := range tc.form {
					form[k] = v
				}
				got = c.post(tc.path, form, role != "")
			}
			if got.Status != tc.expect[i] {
				t.Errorf("%s as %q: status %d, want %d", name, roleName(role), got.Status, tc.expect[i])
			}
			if role == "" && got.Status == 303 && !strings.HasPrefix(got.Location, "/login") {
				t.Errorf("%s anonymous: redirect to %q, want /login", name, got.Location)
			}
		}
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("matrix names %s, which the route table does not have", name)
		}
	}

	// Every state-changing page route refuses a form without the CSRF token, even for an admin.
	for _, rt := range b.srv.routes() {
		if rt.Kind != kindPage || rt.Method != "POST" || rt.Min == access.RoleNone {
			continue
		}
		path := strings.NewReplacer(":id", id).Replace(rt.Path)
		if strings.HasPrefix(rt.Path, "/admin/operators/") {
			path = strings.NewReplacer(":id", tid).Replace(rt.Path)
		}
		if got := b.signIn("a").post(path, url.Values{"csrf": {"forged"}}, false); got.Status != 403 {
			t.Errorf("%s with a wrong CSRF token: status %d, want 403", rt.Path, got.Status)
		}
		if got := b.signIn("a").post(path, nil, false); got.Status != 403 {
			t.Errorf("%s without a CSRF token: status %d, want 403", rt.Path, got.Status)
		}
	}
}

func roleName(r string) string {
	if r == "" {
		return "anonymous"
	}
	return r
}

var figure = regexp.MustCompile(`<span class="figure">(\d+)</span>\s*<span class="label">([^<]+)</span>`)

func dashboardFigures(body string) map[string]int {
	out := map[string]int{}
	for _, m := range figure.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[1])
		out[m[2]] = n
	}
	return out
}

// TestTenantIsolation: an operator limited to one tenant finds nothing of another tenant by any
// route, filter, count, dashboard figure or guessed id.
func TestTenantIsolation(t *testing.T) {
	b := setup(t)
	b.addOperator("acme-op", access.RoleOperator, "acme")
	a1 := b.seedKey("acme", "payment.charge", "acme-key-1", `{"amount":100,"currency":"USD"}`, true)
	a2 := b.seedKey("acme", "payment.charge", "acme-key-2", `{"amount":200,"currency":"USD"}`, false)
	g1 := b.seedKey("globex", "globex.only", "GLOBEX-key-1", `{"amount":300,"currency":"EUR"}`, true)
	g2 := b.seedKey("globex", "globex.only", "GLOBEX-key-2", `{"amount":400,"currency":"EUR"}`, false)
	g3 := b.seedKey("globex", "payment.charge", "GLOBEX-key-3", `{"amount":500,"currency":"EUR"}`, false)
	b.exec(`UPDATE idempotency_keys SET needs_attention = true WHERE id IN (?, ?, ?)`, a2.ID, g2.ID, g3.ID)
	b.exec(`UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id IN (?, ?)`, g2.ID, g3.ID)

	c := b.signIn("acme-op")
	pages := []string{"/keys", "/keys?tenant=globex", "/keys?operation=globex.only", "/keys?digest=" + g1.KeyDigest,
		"/keys?field=currency&value=EUR", "/keys?state=processing", "/keys?tenant=globex&operation=globex.only", "/"}
	for _, p := range pages {
		got := c.get(p)
		if got.Status != 200 {
			t.Errorf("%s: status %d", p, got.Status)
		}
		// The form echoes the filter; the results must hold nothing of globex.
		mustNotContain(t, p, got.Body, "GLOBEX", fmt.Sprintf(`href="/keys/%d"`, g1.ID),
			fmt.Sprintf(`href="/keys/%d"`, g2.ID), fmt.Sprintf(`href="/keys/%d"`, g3.ID))
		if p != "/" && !strings.Contains(p, "state=processing") && strings.Contains(p, "globex") || strings.Contains(p, "digest") {
			mustContain(t, p, got.Body, "No keys match")
		}
	}
	mustNotContain(t, "dashboard", c.get("/").Body, "globex.only")
	mustContain(t, "/keys", c.get("/keys").Body, "acme-key-1", "acme-key-2")

	figs := dashboardFigures(c.get("/").Body)
	if figs["need attention"] != 1 || figs["expired leases"] != 0 || figs["processing"] != 1 {
		t.Errorf("dashboard figures %v, want acme's only: 1 needing attention, 0 expired leases, 1 processing", figs)
	}

	// Guessed ids: another tenant's key answers exactly like a missing one (but for the page's
	// own address, which the header's language and zone switches return to).
	missing := c.get("/keys/999999")
	for _, k := range []int64{g1.ID, g2.ID, g3.ID} {
		p := fmt.Sprintf("/keys/%d", k)
		got := c.get(p)
		if got.Status != 404 || strings.ReplaceAll(got.Body, `value="`+p+`"`, `value="/keys/999999"`) != missing.Body {
			t.Errorf("%s: status %d (want 404, same page as a missing key)", p, got.Status)
		}
		for _, action := range []string{"/reveal", "/check"} {
			if got := c.post(p+action, nil, true); got.Status != 404 {
				t.Errorf("POST %s%s: status %d, want 404", p, action, got.Status)
			}
		}
	}
	// Exact key search for the other tenant's key finds nothing.
	got := c.post("/keys/find", url.Values{"tenant": {"globex"}, "operation": {"globex.only"}, "key": {"GLOBEX-key-1"}}, true)
	if got.Status != 303 {
		t.Fatalf("find: status %d", got.Status)
	}
	mustNotContain(t, "find result", c.get(got.Location).Body, "GLOBEX")

	// The API under the same rules.
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "acme-op", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/v1/keys", "/api/v1/keys?tenant=globex", "/api/v1/keys?digest=" + g1.KeyDigest, "/api/v1/keys?state=processing"} {
		got := c.api(p, tok)
		if got.Status != 200 {
			t.Errorf("%s: %d", p, got.Status)
		}
		mustNotContain(t, p, got.Body, "GLOBEX", "globex")
	}
	if got := c.api(fmt.Sprintf("/api/v1/keys/%d", g1.ID), tok); got.Status != 404 {
		t.Errorf("api detail of another tenant's key: %d, want 404", got.Status)
	}
	if got := c.api(fmt.Sprintf("/api/v1/keys/%d", a1.ID), tok); got.Status != 200 {
		t.Errorf("api detail of own key: %d, want 200", got.Status)
	}
}

func (b *bundle) exec(sql string, args ...any) {
	b.t.Helper()
	if err := b.db.Exec(sql, args...).Error; err != nil {
		b.t.Fatal(err)
	}
}
