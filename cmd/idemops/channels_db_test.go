package main

import (
	"strings"
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestReconcileChannel_SetTenantsListsAndAudits: set-tenants validates the list (exit 2 naming
// the field), stores it and lists it.
func TestReconcileChannel_SetTenantsListsAndAudits(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	run := func(args ...string) (string, error) {
		return runIdemops(t, append(append([]string{"reconcile", "channel"}, args...), "--database-url", url, "--digest-secret", auditTestSecret)...)
	}
	if _, err := run("set-tenants", "wechat-1900000109", " , "); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "tenants") {
		t.Fatalf("empty tenant list: %v", err)
	}
	out, err := run("set-tenants", "wechat-1900000109", "globex,acme")
	if err != nil || !strings.Contains(out, "tenants acme,globex (were *)") {
		t.Fatalf("set-tenants: %v\n%s", err, out)
	}
	out, err = run("list")
	if err != nil || !strings.Contains(out, "wechat-1900000109") || !strings.Contains(out, "acme,globex") {
		t.Fatalf("list: %v\n%s", err, out)
	}
}
