package console

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestOperatorScopeMatrix: (actor: acme admin, * admin) × (target: acme operator, globex
// operator, another * admin, self) × (action: list, mint token, disable, re-scope, demote), each
// on fresh operators so one case cannot change another. Out-of-scope targets are 404 (like a
// missing id) and are absent from the list; refusals leave an audit row.
func TestOperatorScopeMatrix(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*") // stays: the "*" admin never the last one here
	type target struct {
		kind    string
		role    access.Role
		tenants []string
	}
	targets := []target{{"acme-op", access.RoleOperator, []string{"acme"}}, {"globex-op", access.RoleOperator, []string{"globex"}},
		{"star-admin", access.RoleAdmin, []string{"*"}}, {"self", 0, nil}}
	actors := []struct {
		kind    string
		tenants []string
	}{{"acme-admin", []string{"acme"}}, {"star-admin", []string{"*"}}}
	actions := []string{"list", "token", "disable", "rescope", "demote"}
	// want[actor][target][action]
	want := map[string]map[string][5]int{
		"acme-admin": {
			"acme-op":    {200, 200, 303, 303, 303},
			"globex-op":  {0, 404, 404, 404, 404},
			"star-admin": {0, 404, 404, 404, 404},
			"self":       {200, 200, 409, 303, 400},
		},
		"star-admin": {
			"acme-op":    {200, 200, 303, 303, 303},
			"globex-op":  {200, 200, 303, 303, 303},
			"star-admin": {200, 200, 303, 303, 303},
			"self":       {200, 200, 409, 303, 400},
		},
	}
	n, checks := 0, 0
	for _, a := range actors {
		for _, tg := range targets {
			for ai, action := range actions {
				n++
				actor := b.addOperator(fmt.Sprintf("actor%d", n), access.RoleAdmin, a.tenants...)
				tgt := actor
				if tg.kind != "self" {
					tgt = b.addOperator(fmt.Sprintf("target%d", n), tg.role, tg.tenants...)
				}
				c := b.signIn(actor.Name)
				path := fmt.Sprintf("/admin/operators/%d", tgt.ID)
				exp := want[a.kind][tg.kind][ai]
				var got resp
				switch action {
				case "list":
					got = c.get("/admin/operators")
					listed := strings.Contains(got.Body, ">"+tgt.Name+"<")
					if got.Status != 200 || listed != (exp == 200) {
						t.Errorf("%s lists %s: status %d, listed %v, want listed %v", a.kind, tg.kind, got.Status, listed, exp == 200)
					}
					checks++
					continue
				case "token":
					got = c.post(path+"/tokens", map[string][]string{"label": {"x"}}, true)
				case "disable":
					got = c.post(path+"/status", map[string][]string{"disabled": {"true"}}, true)
				case "rescope":
					role, ten := tgt.Role, strings.Join(tgt.Tenants, ",")
					got = c.post(path+"/access", map[string][]string{"role": {role.String()}, "tenants": {ten}}, true)
				case "demote":
					got = c.post(path+"/access", map[string][]string{"role": {"viewer"}, "tenants": {strings.Join(tgt.Tenants, ",")}}, true)
				}
				checks++
				if got.Status != exp {
					t.Errorf("%s %s %s: %d, want %d", a.kind, action, tg.kind, got.Status, exp)
				}
				// The target's state moved only when the action was allowed.
				after, err := b.srv.ops.ByID(context.Background(), tgt.ID)
				if err != nil {
					t.Fatal(err)
				}
				changed := after.Disabled != tgt.Disabled || after.Role != tgt.Role
				if action == "disable" || action == "demote" {
					if changed != (exp == 303) {
						t.Errorf("%s %s %s: changed=%v after status %d", a.kind, action, tg.kind, changed, got.Status)
					}
				}
				var tokens int64
				b.db.Raw(`SELECT count(*) FROM api_tokens WHERE operator_id = ?`, tgt.ID).Scan(&tokens)
				if (tokens > 0) != (action == "token" && exp == 200) {
					t.Errorf("%s %s %s: %d tokens after status %d", a.kind, action, tg.kind, tokens, got.Status)
				}
				if exp == 404 || exp == 409 {
					if audited := b.refusals(`actor = ?`, actor.Actor()); audited == 0 {
						t.Errorf("%s %s %s: refusal not audited", a.kind, action, tg.kind)
					}
				}
			}
		}
	}
	t.Logf("operator scope matrix: %d actors × %d targets × %d actions = %d checks", len(actors), len(targets), len(actions), checks)
	if checks != 40 {
		t.Fatalf("%d checks, want 40", checks)
	}

	// A tenant admin grants only what it has: another tenant or "*" is 403 naming the tenant.
	acmeAdmin := b.addOperator("acme-boss", access.RoleAdmin, "acme")
	acmeOp := b.addOperator("acme-worker", access.RoleOperator, "acme")
	c := b.signIn(acmeAdmin.Name)
	for _, ten := range []string{"globex", "acme,globex", "*"} {
		got := c.post(fmt.Sprintf("/admin/operators/%d/access", acmeOp.ID), map[string][]string{"role": {"operator"}, "tenants": {ten}}, true)
		if got.Status != 403 || !strings.Contains(got.Body, "you may not grant tenant") {
			t.Errorf("acme admin grants %q: %d", ten, got.Status)
		}
		got = c.post("/admin/operators", map[string][]string{"name": {"new-" + strings.NewReplacer(",", "-", "*", "star").Replace(ten)},
			"password": {"a long enough password"}, "role": {"viewer"}, "tenants": {ten}}, true)
		if got.Status != 403 {
			t.Errorf("acme admin adds an operator of %q: %d", ten, got.Status)
		}
	}
	if o, _ := b.srv.ops.ByID(context.Background(), acmeOp.ID); strings.Join(o.Tenants, ",") != "acme" {
		t.Errorf("refused grant changed tenants to %v", o.Tenants)
	}
	// An operator of acme and globex is not wholly inside acme: not manageable by an acme admin.
	both := b.addOperator("both", access.RoleOperator, "acme", "globex")
	if got := c.post(fmt.Sprintf("/admin/operators/%d/status", both.ID), map[string][]string{"disabled": {"true"}}, true); got.Status != 404 {
		t.Errorf("acme admin disables an acme+globex operator: %d, want 404", got.Status)
	}
	if got := c.post("/admin/operators/abc/status", map[string][]string{"disabled": {"true"}}, true); got.Status != 404 {
		t.Errorf("malformed id: %d", got.Status)
	}
}

// TestLastStarAdminProtected: the last active "*" admin can be neither disabled nor demoted, from
// the console or the CLI; two "*" admins disabling each other at once leave one.
func TestLastStarAdminProtected(t *testing.T) {
	b := setup(t)
	a := b.addOperator("alpha", access.RoleAdmin, "*")
	z := b.addOperator("zulu", access.RoleAdmin, "*")
	ctx := context.Background()
	ca, cz := b.signIn("alpha"), b.signIn("zulu")
	var wg sync.WaitGroup
	var sa, sz int
	wg.Add(2)
	go func() {
		defer wg.Done()
		sa = ca.post(fmt.Sprintf("/admin/operators/%d/status", z.ID), map[string][]string{"disabled": {"true"}}, true).Status
	}()
	go func() {
		defer wg.Done()
		sz = cz.post(fmt.Sprintf("/admin/operators/%d/status", a.ID), map[string][]string{"disabled": {"true"}}, true).Status
	}()
	wg.Wait()
	// One wins (303); the other is either refused as the last admin (409) or finds its own
	// session ended (303 to /login) — never both disabled.
	var active int64
	b.db.Raw(`SELECT count(*) FROM operators WHERE role = 'admin' AND NOT disabled`).Scan(&active)
	if active != 1 {
		t.Fatalf("mutual disable (%d, %d): %d active * admins, want 1", sa, sz, active)
	}
	var last *access.Operator
	for _, n := range []string{"alpha", "zulu"} {
		if o, _ := b.srv.ops.ByName(ctx, n); !o.Disabled {
			last = o
		}
	}
	other := b.addOperator("helper", access.RoleAdmin, "*")
	ch := b.signIn(other.Name)
	// helper is active too now; disable helper's peer is fine, but first make last the only one again.
	if err := b.srv.ops.SetDisabled(ctx, access.Change{Actor: "test"}, other.Name, true); err != nil {
		t.Fatal(err)
	}
	_ = ch
	// The CLI (no scope) cannot disable or demote the last one either.
	if err := b.srv.ops.SetDisabled(ctx, access.Change{Actor: "cli:test"}, last.Name, true); !isRefusal(err) {
		t.Errorf("CLI disables the last * admin: %v", err)
	}
	if err := b.srv.ops.SetAccess(ctx, access.Change{Actor: "cli:test"}, last.Name, access.RoleOperator, []string{"*"}); !isRefusal(err) {
		t.Errorf("CLI demotes the last * admin: %v", err)
	}
	// From the console: re-scoping oneself out of "*" is a demotion of the last one: 409 with reason.
	cl := b.signIn(last.Name)
	got := cl.post(fmt.Sprintf("/admin/operators/%d/access", last.ID), map[string][]string{"role": {"admin"}, "tenants": {"acme"}}, true)
	if got.Status != 409 || !strings.Contains(got.Body, "last active admin") {
		t.Errorf("last * admin re-scopes themselves to acme: %d", got.Status)
	}
	if got := cl.post(fmt.Sprintf("/admin/operators/%d/status", last.ID), map[string][]string{"disabled": {"true"}}, true); got.Status != 409 ||
		!strings.Contains(got.Body, "cannot disable yourself") {
		t.Errorf("self-disable: %d", got.Status)
	}
	if o, _ := b.srv.ops.ByID(ctx, last.ID); o.Disabled || o.Role != access.RoleAdmin || !o.SeesAllTenants() {
		t.Errorf("the last * admin changed: %+v", o)
	}
	// With a second "*" admin back, the demotion goes through.
	if err := b.srv.ops.SetDisabled(ctx, access.Change{Actor: "test"}, other.Name, false); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ops.SetAccess(ctx, access.Change{Actor: "cli:test"}, last.Name, access.RoleOperator, []string{"*"}); err != nil {
		t.Errorf("demote with another * admin active: %v", err)
	}
	if refusals := b.refusals(`actor = ?`, last.Actor()); refusals < 2 {
		t.Errorf("%d refusals audited for %s, want 2", refusals, last.Name)
	}
}
