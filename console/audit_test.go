package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"gorm.io/gorm"
)

func (b *bundle) appendAudit(n int) {
	b.t.Helper()
	for i := 0; i < n; i++ {
		if err := b.srv.audit.Append(context.Background(), nil, Entry{Actor: "operator:t", Action: "test.action",
			Target: fmt.Sprintf("key:%d", i), Tenant: "acme", Detail: map[string]any{"i": i}}); err != nil {
			b.t.Fatal(err)
		}
	}
}

// tamper runs sql on audit_log with its append-only triggers switched off, as the table's
// owner could.
func (b *bundle) tamper(sql string) {
	b.t.Helper()
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`ALTER TABLE audit_log DISABLE TRIGGER USER`).Error; err != nil {
			return err
		}
		if err := tx.Exec(sql).Error; err != nil {
			return err
		}
		return tx.Exec(`ALTER TABLE audit_log ENABLE TRIGGER USER`).Error
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

func TestAudit_AppendOnly(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.appendAudit(3)
	for _, sql := range []string{`UPDATE audit_log SET actor = 'x' WHERE seq = 2`, `DELETE FROM audit_log WHERE seq = 3`, `TRUNCATE audit_log`} {
		if err := b.db.Exec(sql).Error; err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err %v, want the append-only trigger to refuse it", sql, err)
		}
	}
}

func TestAudit_VerifyFindsTheFirstBadRow(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tamper string
		bad    int64
	}{
		"intact":       {"", 0},
		"edited":       {`UPDATE audit_log SET detail = '{"i":99}' WHERE seq = 3`, 3},
		"deleted":      {`DELETE FROM audit_log WHERE seq = 2`, 3},
		"rehashed":     {`UPDATE audit_log SET actor = 'operator:mallory', hash = repeat('a', 64) WHERE seq = 2`, 2},
		"forged chain": {`UPDATE audit_log SET prev_hash = repeat('b', 64) WHERE seq = 4`, 4},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			b.appendAudit(5)
			if tc.tamper != "" {
				b.tamper(tc.tamper)
			}
			res, err := b.srv.audit.Verify(context.Background(), VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.BadSeq != tc.bad {
				t.Errorf("first bad row %d (%s), want %d", res.BadSeq, res.Reason, tc.bad)
			}
		})
	}
}

func TestAudit_PageFiltersAndAdminActions(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.addOperator("root", RoleAdmin, "*")
	b.addOperator("acme-admin", RoleAdmin, "acme")
	admin := b.signIn("root")

	got := admin.post("/admin/operators", url.Values{"name": {"carol"}, "password": {"a long enough password"},
		"role": {"operator"}, "tenants": {"acme, globex"}}, true)
	if got.Status != 303 {
		t.Fatalf("add operator: %d %s", got.Status, got.Body)
	}
	carol, err := b.srv.ops.ByName(context.Background(), "carol")
	if err != nil || carol.Role != RoleOperator || strings.Join(carol.Tenants, ",") != "acme,globex" {
		t.Fatalf("carol: %+v %v", carol, err)
	}
	if got := admin.post("/admin/operators", url.Values{"name": {"carol"}, "password": {"a long enough password"},
		"role": {"viewer"}, "tenants": {"acme"}}, true); got.Status != 409 {
		t.Errorf("duplicate name: %d, want 409", got.Status)
	}
	if got := admin.post("/admin/operators", url.Values{"name": {"dave"}, "password": {"short"},
		"role": {"viewer"}, "tenants": {"acme"}}, true); got.Status != 400 || !strings.Contains(got.Body, "password: ") {
		t.Errorf("short password: %d", got.Status)
	}
	id := fmt.Sprint(carol.ID)
	if got := admin.post("/admin/operators/"+id+"/access", url.Values{"role": {"viewer"}, "tenants": {"acme"}}, true); got.Status != 303 {
		t.Errorf("set access: %d", got.Status)
	}
	if got := admin.post("/admin/operators/"+id+"/status", url.Values{"disabled": {"true"}}, true); got.Status != 303 {
		t.Errorf("disable: %d", got.Status)
	}
	if got := admin.post("/admin/operators/"+id+"/tokens", url.Values{"label": {"ci"}}, true); got.Status != 200 || !strings.Contains(got.Body, tokenPrefix) {
		t.Errorf("token: %d", got.Status)
	}
	// An admin limited to acme cannot grant globex, nor see globex's audit rows.
	limited := b.signIn("acme-admin")
	if got := limited.post("/admin/operators/"+id+"/access", url.Values{"role": {"admin"}, "tenants": {"*"}}, true); got.Status != 403 {
		t.Errorf("limited admin grants *: %d, want 403", got.Status)
	}
	if err := b.srv.audit.Append(context.Background(), nil, Entry{Actor: "operator:x", Action: "key.reveal", Tenant: "globex", Target: "key:9"}); err != nil {
		t.Fatal(err)
	}
	if got := limited.get("/audit?action=key.reveal"); strings.Contains(got.Body, "key:9") {
		t.Error("an admin limited to acme sees a globex audit row")
	}

	page := admin.get("/audit")
	for _, action := range []string{"operator.add", "operator.set_access", "operator.disable", "token.create"} {
		mustContain(t, "audit page", page.Body, action)
	}
	filtered := admin.get("/audit?action=operator.disable")
	mustContain(t, "filtered audit", filtered.Body, "operator:carol")
	mustNotContain(t, "filtered audit", filtered.Body, "operator.add")
	if got := admin.get("/audit?from=yesterday"); got.Status != 400 {
		t.Errorf("bad audit filter: %d", got.Status)
	}
	if res, err := b.srv.audit.Verify(context.Background(), VerifyOptions{}); err != nil || !res.OK() || res.Rows < 6 {
		t.Errorf("verify after admin actions: %+v %v", res, err)
	}
}
