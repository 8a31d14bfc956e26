package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// TestOperatorCLI_FindingsBulkAndExportWithinTheOperatorsTenants: `findings bulk` previews in
// the operator's tenants and writes nothing, then starts the run up to what the preview saw
// (a finding found after the preview is left alone); `findings export` writes the operator's
// findings only, as CSV to stdout or as an XLSX file, and both are audited. Another tenant's
// findings are neither counted, acted on nor exported.
func TestOperatorCLI_FindingsBulkAndExportWithinTheOperatorsTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	db := pgtest.Open(t, dbURL)
	secret := []byte("findings-cli-test-secret-01")
	dir := dataDirWithSecret(t, secret)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(db, reconcile.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	run, err := rec.StartRun(ctx, nil, "wechat", "2026-12-01", "test")
	if err != nil {
		t.Fatal(err)
	}
	// seed inserts n open LOCAL_ONLY findings of tenant with order numbers prefix1…n, 100·i CNY
	// minor units each.
	seed := func(n int, tenant, prefix string) {
		t.Helper()
		if err := db.Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, tenant, detail)
			SELECT ?, ?, 'wechat', '2026-12-01'::date, 'LOCAL_ONLY', 'order:' || ?::text || i, ?::text,
			       jsonb_build_object('merchant_order_no', ?::text || i, 'local_amount_minor', 100 * i, 'local_currency', 'CNY')
			FROM generate_series(1, ?) i`, run, run, prefix, tenant, prefix, n).Error; err != nil {
			t.Fatal(err)
		}
	}
	seed(3, "acme", "acme-")
	seed(2, "globex", "globex-")

	ops := access.NewOperators(db, access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, secret))
	if _, err := ops.Add(ctx, access.Change{Actor: "operator:test"}, access.NewOperator{Name: "fiona",
		Password: "a long password 123", Role: access.RoleOperator, Tenants: []string{"acme"}}); err != nil {
		t.Fatal(err)
	}
	tok, err := ops.CreateToken(ctx, access.Change{Actor: "operator:test"}, "fiona", "cli", 0)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "fiona.token")
	if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run1 := func(args ...string) (string, error) {
		return runIdemopsIn(t, "", append(args, "--database-url", dbURL, "--data-dir", dir, "--token-file", tokenFile)...)
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v (out %q)", err, out)
		}
		return out
	}
	openCount := func(tenant string) (n int64) {
		t.Helper()
		if err := db.Raw(`SELECT count(*) FROM discrepancies WHERE tenant = ? AND state = 'open'`, tenant).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The preview: acme's three, 600 minor units of CNY, nothing written.
	var p reconcile.BulkPreview
	out := must(run1("findings", "bulk", "--action", "ignore", "--reason-code", "test_transaction", "--kind", "LOCAL_ONLY", "--json"))
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("preview: %v in %q", err, out)
	}
	if p.Count != 3 || p.Amounts["CNY"] != 600 || p.UpTo == 0 {
		t.Errorf("preview = count %d, amounts %v, upto %d; want acme's 3 findings, 600 CNY, a newest id", p.Count, p.Amounts, p.UpTo)
	}
	text := must(run1("findings", "bulk", "--action", "ignore", "--reason-code", "test_transaction", "--kind", "LOCAL_ONLY"))
	if !strings.Contains(text, "3 findings would be ignored") || !strings.Contains(text, "--start --upto") || strings.Contains(text, "globex-") {
		t.Errorf("preview text:\n%s\nwant 3 ignored, the start line, no globex order", text)
	}
	var runs int64
	if err := db.Raw(`SELECT count(*) FROM finding_bulk_runs`).Scan(&runs).Error; err != nil || runs != 0 {
		t.Fatalf("after two previews: %d bulk runs (%v); want none", runs, err)
	}

	// A finding found after the preview is not part of the run started from it.
	seed(1, "acme", "late-")
	if _, err := run1("findings", "bulk", "--action", "ignore", "--reason-code", "test_transaction", "--start"); err == nil || exitCode(err) != 2 {
		t.Errorf("--start without --upto: %v; want exit 2", err)
	}
	var br reconcile.BulkRun
	out = must(run1("findings", "bulk", "--action", "ignore", "--reason-code", "test_transaction", "--kind", "LOCAL_ONLY",
		"--start", "--upto", strconv.FormatInt(p.UpTo, 10), "--json"))
	if err := json.Unmarshal([]byte(out), &br); err != nil {
		t.Fatalf("start: %v in %q", err, out)
	}
	if br.ID == 0 || br.Total != 3 || br.Operator != "fiona" || strings.Join(br.Tenants, ",") != "acme" {
		t.Errorf("started run = %+v; want fiona's run of acme's 3 findings", br)
	}
	if n := openCount("globex"); n != 2 {
		t.Errorf("globex open findings after acme's bulk start: %d; want 2", n)
	}

	// Export: acme's four (with the late one) as CSV, none of globex's; an XLSX file.
	csvOut := must(run1("findings", "export", "--format", "csv", "--kind", "LOCAL_ONLY"))
	if !strings.HasPrefix(csvOut, "\ufeff") || strings.Count(csvOut, "acme-")+strings.Count(csvOut, "late-") < 4 || strings.Contains(csvOut, "globex-") {
		t.Errorf("csv export:\n%s\nwant a BOM, acme's findings, none of globex's", csvOut)
	}
	xlsx := filepath.Join(dir, "out.xlsx")
	must(run1("findings", "export", "--format", "xlsx", "--output", xlsx))
	if b, err := os.ReadFile(xlsx); err != nil || !strings.HasPrefix(string(b), "PK") {
		t.Errorf("xlsx export: %v, %d bytes; want a zip workbook", err, len(b))
	}
	if _, err := run1("findings", "export", "--format", "xlsx"); err == nil || exitCode(err) != 2 {
		t.Errorf("xlsx without --output: %v; want exit 2", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".findings-export-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary export files left: %v", leftovers)
	}

	var actions []string
	if err := db.Raw(`SELECT action FROM audit_log WHERE actor LIKE '%fiona%' ORDER BY seq`).Scan(&actions).Error; err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(actions, " ")
	if strings.Count(joined, "reconcile.findings.export") != 2 || !strings.Contains(joined, "bulk") {
		t.Errorf("fiona's audit actions: %v; want the bulk start and two exports", actions)
	}
}
