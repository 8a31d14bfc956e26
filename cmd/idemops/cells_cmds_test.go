package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// The operator commands that work on the data of a deployment of cells (--cells / IDEMOPS_CELLS):
// each works every cell it concerns, and the control cell for what lives there alone.

// openTestCells opens the map's cells as a deployment does first (ids kept in each cell's range),
// so rows seeded afterwards have ids unique across the cells; closed at cleanup.
func openTestCells(t *testing.T, mapPath string, secret []byte) (*cells.Set, map[string]*gorm.DB) {
	t.Helper()
	m, err := cells.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	set, err := cells.Open(context.Background(), m, cells.Options{Claim: claim.Config{DigestSecret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	dbs := map[string]*gorm.DB{}
	for _, c := range set.Cells() {
		dbs[c.Name] = c.DB
	}
	return set, dbs
}

// claimed is a key claimed by claimIn, with the store that holds its lease.
type claimed struct {
	*claim.Outcome
	Store *claim.Store
}

// claimIn claims key for tenant (payment.charge) in the cell whose database is db.
func claimIn(t *testing.T, db *gorm.DB, secret []byte, tenant, key string) claimed {
	t.Helper()
	st, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Claim(context.Background(), claim.Request{Tenant: tenant, Operation: "payment.charge", Key: key,
		Intent: json.RawMessage(`{"amount":1}`), Actor: "service:test"})
	if err != nil || res.Kind != claim.Acquired {
		t.Fatalf("claim %s of %s: %v %v", key, tenant, res, err)
	}
	return claimed{res, st}
}

func count(t *testing.T, db *gorm.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Raw(query, args...).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestMigrateWithCells_MigratesEveryCellAndNamesTheOneThatFails: `migrate up --cells` applies the
// migrations to every cell (a new, empty cell gets the whole schema), `status` lists each cell's,
// and a cell that cannot be reached fails the command naming it, after the cells before it.
func TestMigrateWithCells_MigratesEveryCellAndNamesTheOneThatFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	urlA, urlB := pgtest.URL(t), pgtest.EmptyURL(t)
	mapPath := filepath.Join(dir, "cells.yaml")
	writeMap := func(b string) {
		t.Helper()
		if err := os.WriteFile(mapPath, []byte(fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
			urlA, b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMap(urlB)
	out, err := runIdemops(t, "migrate", "up", "--cells", mapPath)
	if err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "cell a: schema is up to date\n") || !strings.Contains(out, "cell b: applied 00001_") {
		t.Errorf("migrate up: want a up to date and b migrated from 00001:\n%s", out)
	}
	b := pgtest.Open(t, urlB)
	if n := count(t, b, `SELECT count(*) FROM information_schema.tables WHERE table_name IN ('idempotency_keys', 'cell_fences', 'recon_runs')`); n != 3 {
		t.Errorf("cell b has %d of the schema's tables, want 3", n)
	}
	out, err = runIdemops(t, "migrate", "status", "--cells", mapPath)
	if err != nil || strings.Contains(out, "pending") || !strings.Contains(out, "cell a: 00001_") || !strings.Contains(out, "cell b: 00001_") {
		t.Errorf("migrate status: %v\n%s", err, out)
	}

	_, nowhere := pgtest.Unreachable(t)
	writeMap("postgres://idemops@" + nowhere + "/none?connect_timeout=2")
	out, err = runIdemops(t, "migrate", "up", "--cells", mapPath)
	if err == nil || !strings.HasPrefix(err.Error(), "cell b: ") {
		t.Errorf("migrate up with b unreachable: %v; want an error naming cell b", err)
	}
	if !strings.Contains(out, "cell a: schema is up to date") {
		t.Errorf("cell a was not migrated before b failed:\n%s", out)
	}
	// The map is refused before any database is opened, as everywhere else.
	_, err = runIdemops(t, "migrate", "up", "--cells", filepath.Join(dir, "missing.yaml"))
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing map: %v (exit %d)", err, exitCode(err))
	}
}

// TestJobsWithCells_CellJobsRunInEveryCellAReconJobInTheControlCell: `jobs list --cells` shows
// each cell's schedules; `jobs run` runs a cell's own job (the reclaimer) in every cell, or in the
// one --cell names, and a recon job's schedule once, in the control cell, whose run sends the
// statement to every cell — each cell's run names the job and the control's run.
func TestJobsWithCells_CellJobsRunInEveryCellAReconJobInTheControlCell(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	urls, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	cellsFlag := []string{"--cells", mapPath, "--data-dir", dir}

	out, err := runIdemops(t, append([]string{"jobs", "run", "reclaim"}, cellsFlag...)...)
	if err != nil || !strings.Contains(out, "cell a: run ") || !strings.Contains(out, "cell b: run ") {
		t.Fatalf("jobs run reclaim: %v\n%s", err, out)
	}
	for name, db := range dbs {
		if n := count(t, db, `SELECT count(*) FROM job_runs WHERE job = 'reclaim' AND status = 'succeeded'`); n != 1 {
			t.Errorf("cell %s: %d reclaim runs, want 1", name, n)
		}
	}
	out, err = runIdemops(t, append([]string{"jobs", "run", "reclaim", "--cell", "b"}, cellsFlag...)...)
	if err != nil || strings.Contains(out, "cell a:") || !strings.Contains(out, "cell b: run ") {
		t.Errorf("jobs run reclaim --cell b: %v\n%s", err, out)
	}
	if a, b := count(t, dbs["a"], `SELECT count(*) FROM job_runs WHERE job = 'reclaim'`), count(t, dbs["b"], `SELECT count(*) FROM job_runs WHERE job = 'reclaim'`); a != 1 || b != 2 {
		t.Errorf("reclaim runs a=%d b=%d, want 1 and 2", a, b)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "run", "reclaim", "--cell", "zzz"}, "--cell zzz: no such cell in " + mapPath},
		{[]string{"jobs", "run", "no-such-job"}, "jobs run no-such-job: no such job or schedule"},
	} {
		_, err := runIdemops(t, append(tc.args, cellsFlag...)...)
		if err == nil || exitCode(err) != 2 || strings.Count(err.Error(), "no such") != 1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d); want exit 2, once: %q", tc.args, err, exitCode(err), tc.want)
		}
	}

	// A recon job lives in the control cell; its statement is matched in the cells. The
	// statement is there for whichever bill date the run asks for.
	stmt, err := os.ReadFile(filepath.Join(statements, "wechat/all_trades.csv"))
	if err != nil {
		t.Fatal(err)
	}
	bills := t.TempDir()
	for d := -3; d <= 1; d++ {
		if err := os.WriteFile(filepath.Join(bills, time.Now().UTC().AddDate(0, 0, d).Format(time.DateOnly)+".csv"), stmt, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := runIdemops(t, "reconcile", "jobs", "add", "--name", "wechat-daily", "--channel", "wechat", "--format", "wechat",
		"--recon-file-root", bills, "--source", filepath.Join(bills, "{date}.csv"), "--operation", "payment.charge", "--cron", "0 11 * * *",
		"--tz", "UTC", "--database-url", urls["a"]); err != nil {
		t.Fatalf("reconcile jobs add: %v\n%s", err, out)
	}
	out, err = runIdemops(t, append([]string{"jobs", "run", "reconcile:wechat-daily", "--recon-file-root", bills}, cellsFlag...)...)
	if err != nil || !strings.Contains(out, "cell a: run ") || strings.Contains(out, "cell b:") {
		t.Fatalf("jobs run of the recon job: %v; want one run, in cell a:\n%s", err, out)
	}
	var control struct {
		ID     int64
		JobID  *int64
		Counts string
	}
	dbs["a"].Raw(`SELECT id, job_id, counts::text AS counts FROM recon_runs WHERE job_id IS NOT NULL`).Scan(&control)
	if control.JobID == nil {
		t.Fatal("no run of the recon job in the control cell")
	}
	for name, db := range dbs {
		var runs []struct {
			ControlRunID *int64
			JobName      *string
		}
		db.Raw(`SELECT control_run_id, job_name FROM recon_runs WHERE job_id IS NULL`).Scan(&runs)
		if len(runs) != 1 || runs[0].ControlRunID == nil || *runs[0].ControlRunID != control.ID || runs[0].JobName == nil || *runs[0].JobName != "wechat-daily" {
			t.Errorf("cell %s's runs %+v: want one, started by run %d of wechat-daily", name, runs, control.ID)
		}
		if n := count(t, db, `SELECT count(*) FROM statement_lines`); n != 4 {
			t.Errorf("cell %s: %d statement lines, want the statement's 4", name, n)
		}
	}
	// Each cell has its own schedules: the recon job's is the control cell's alone.
	out, err = runIdemops(t, append([]string{"jobs", "list"}, cellsFlag...)...)
	if err != nil || !strings.Contains(out, "== cell a\n") || !strings.Contains(out, "== cell b\n") ||
		strings.Count(out, "reconcile:wechat-daily") != 1 {
		t.Errorf("jobs list --cells: %v; want both cells, the recon schedule once (a's):\n%s", err, out)
	}
}

// TestReconcileImportWithCells_GoesToTheCellsOfTheAccountsTenants: an ad hoc `reconcile import
// --cells` is imported and matched in every cell holding one of the channel account's tenants —
// all of them for a channel without an account — and the run printed is the control's, with the
// cells' findings settled across them (a line no cell has a key for is one CHANNEL_ONLY, not one
// per cell).
func TestReconcileImportWithCells_GoesToTheCellsOfTheAccountsTenants(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	urls, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	file := filepath.Join(statements, "wechat/all_trades.csv")

	out, err := runIdemops(t, "reconcile", "import", "--channel", "wechat", "--format", "wechat", file, "--cells", mapPath, "--data-dir", dir, "--json")
	if err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	var run struct {
		ID     int64            `json:"id"`
		Status string           `json:"status"`
		Counts map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out), &run); err != nil || run.Status != "succeeded" || run.Counts["CHANNEL_ONLY"] != 3 {
		t.Fatalf("import's run %+v (%v): want succeeded with 3 CHANNEL_ONLY (once, not once per cell)\n%s", run, err, out)
	}
	for name, db := range dbs {
		if n := count(t, db, `SELECT count(*) FROM recon_runs WHERE control_run_id = ?`, run.ID); n != 1 {
			t.Errorf("cell %s: %d runs started by %d, want 1", name, n, run.ID)
		}
		if n := count(t, db, `SELECT count(*) FROM statement_lines l JOIN statements s ON s.id = l.statement_id WHERE s.channel = 'wechat'`); n != 4 {
			t.Errorf("cell %s: %d lines of the statement, want 4", name, n)
		}
	}
	if n := count(t, dbs["a"], `SELECT count(*) FROM recon_runs WHERE id = ? AND control_run_id IS NULL`, run.ID); n != 1 {
		t.Errorf("the run printed (%d) is not the control cell's own", run.ID)
	}

	// A channel account of globex alone: its statement goes to cell b only.
	if out, err := runIdemops(t, "reconcile", "channel", "set-tenants", "wechat-hk", "globex", "--database-url", urls["a"], "--data-dir", dir); err != nil {
		t.Fatalf("set-tenants: %v\n%s", err, out)
	}
	if out, err := runIdemops(t, "reconcile", "import", "--channel", "wechat-hk", "--format", "wechat", file, "--cells", mapPath, "--data-dir", dir); err != nil {
		t.Fatalf("import wechat-hk: %v\n%s", err, out)
	}
	for name, want := range map[string]int64{"a": 0, "b": 1} {
		if n := count(t, dbs[name], `SELECT count(*) FROM statements WHERE channel = 'wechat-hk'`); n != want {
			t.Errorf("cell %s: %d wechat-hk statements, want %d", name, n, want)
		}
	}
	// Its findings are cell b's: `findings list --cells` lists them, the control cell alone not.
	findings := func(args ...string) int {
		t.Helper()
		out, err := runIdemops(t, append([]string{"findings", "list", "--channel", "wechat-hk", "--json", "--data-dir", dir}, args...)...)
		if err != nil {
			t.Fatalf("findings list %v: %v", args, err)
		}
		return strings.Count(out, `"kind":"CHANNEL_ONLY"`)
	}
	if n, alone := findings("--cells", mapPath), findings("--database-url", urls["a"]); n != 3 || alone != 0 {
		t.Errorf("wechat-hk's CHANNEL_ONLY findings: %d with --cells, %d in the control cell alone; want 3 and 0", n, alone)
	}
}

// TestAuditAndKeysWithCells_TheControlChainAndEveryCellsKeys: `audit verify --cells` walks the
// control cell's chain (where every cell's actions are audited); `keys search`, `find` and `show`
// with --cells read every cell's keys, as the console does.
func TestAuditAndKeysWithCells_TheControlChainAndEveryCellsKeys(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	urls, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	ctx := context.Background()
	if err := audit.New(dbs["a"], secret).Append(ctx, nil, audit.Entry{Actor: "operator:test", Action: "test.control"}); err != nil {
		t.Fatal(err)
	}
	out, err := runIdemops(t, "audit", "verify", "--cells", mapPath, "--data-dir", dir)
	if err != nil || !strings.Contains(out, "audit log intact: 1 rows") {
		t.Errorf("audit verify --cells: %v; want the control cell's one row\n%s", err, out)
	}

	idA, idB := claimIn(t, dbs["a"], secret, "acme", "k-acme").KeyID, claimIn(t, dbs["b"], secret, "globex", "k-globex").KeyID
	keysCmd := func(stdin string, args ...string) (string, error) {
		return runIdemopsIn(t, stdin, append(append([]string{"keys"}, args...), "--cells", mapPath, "--data-dir", dir)...)
	}
	out, err = keysCmd("", "search", "--json")
	if err != nil {
		t.Fatalf("keys search: %v", err)
	}
	var ids []int64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var k struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("keys search line %q: %v", line, err)
		}
		ids = append(ids, k.ID)
	}
	if len(ids) != 2 || ids[0] != idB || ids[1] != idA {
		t.Errorf("keys search --cells: %v, want globex's %d (newer) then acme's %d", ids, idB, idA)
	}
	if out, err = keysCmd("k-globex\n", "find"); err != nil || !strings.Contains(out, fmt.Sprint(idB)) {
		t.Errorf("keys find k-globex: %v\n%s", err, out)
	}
	if out, err = keysCmd("", "show", fmt.Sprint(idB)); err != nil || !strings.Contains(out, "globex") {
		t.Errorf("keys show %d (cell b's): %v\n%s", idB, err, out)
	}
	// Without the map, the control cell alone: cell b's key is not there.
	if _, err = runIdemops(t, "keys", "show", fmt.Sprint(idB), "--database-url", urls["a"], "--data-dir", dir); err == nil {
		t.Errorf("keys show %d on cell a alone found cell b's key", idB)
	}
}

// TestPurgeWithCells_PurgesEveryCellByItsOwnPolicies: `retention policies set --cells` saves the
// policy in every cell, and `purge --cells` purges what is due in every cell under it (here: a
// response whose period is over, in each); `hold set --cells` holds a key in its own cell.
func TestPurgeWithCells_PurgesEveryCellByItsOwnPolicies(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	_, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	ctx := context.Background()
	ids := map[string]int64{}
	for cell, tenant := range map[string]string{"a": "acme", "b": "globex"} {
		for _, key := range []string{"old", "new"} {
			res := claimIn(t, dbs[cell], secret, tenant, key)
			ids[cell+"/"+key] = res.KeyID
			if err := res.Store.Complete(ctx, nil, res.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		// The old key's period is over.
		pgtest.Exec(t, dbs[cell], `UPDATE idempotency_keys SET expires_at = now() - interval '1 day', response_expires_at = now() - interval '1 day' WHERE key = 'old'`)
	}
	// A policy set with the map is every cell's: each cell's purge reads its own.
	if out, err := runIdemops(t, "retention", "policies", "set", "--operation", "payment.charge", "--state", "completed",
		"--keep-response", "30d", "--keep-key", "90d", "--cells", mapPath, "--data-dir", dir); err != nil || strings.Count(out, "saved payment.charge/completed") != 2 {
		t.Fatalf("retention policies set --cells: %v\n%s", err, out)
	}
	for cell, db := range dbs {
		if n := count(t, db, `SELECT count(*) FROM retention_policies WHERE operation = 'payment.charge'`); n != 1 {
			t.Errorf("cell %s has %d policies of payment.charge, want 1", cell, n)
		}
	}
	if out, err := runIdemops(t, "retention", "policies", "list", "--cells", mapPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "== cell a\n") || !strings.Contains(out, "== cell b\n") || strings.Count(out, "payment.charge") != 2 {
		t.Errorf("retention policies list --cells: %v\n%s", err, out)
	}
	// The old key's period is over: its stamps are re-set from the policy, a month before.
	for _, db := range dbs {
		pgtest.Exec(t, db, `UPDATE idempotency_keys SET completed_at = now() - interval '60 days' WHERE key = 'old'`)
	}
	out, err := runIdemops(t, "purge", "--cells", mapPath, "--data-dir", dir)
	if err != nil || !strings.Contains(out, "== cell a\n") || !strings.Contains(out, "== cell b\n") || strings.Count(out, "tombstoned 1 responses") != 2 {
		t.Fatalf("purge --cells: %v; want one response tombstoned in each cell\n%s", err, out)
	}
	// A legal hold goes to the key's own cell.
	if out, err := runIdemops(t, "hold", "set", "--key-id", fmt.Sprint(ids["b/new"]), "--reason", "court order", "--cells", mapPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "is now on legal hold") {
		t.Errorf("hold set of cell b's key: %v\n%s", err, out)
	}
	if n := count(t, dbs["b"], `SELECT count(*) FROM idempotency_keys WHERE legal_hold`); n != 1 {
		t.Errorf("cell b: %d keys on legal hold, want 1", n)
	}
	if _, err := runIdemops(t, "hold", "set", "--key-id", "12345", "--reason", "r", "--cells", mapPath, "--data-dir", dir); err == nil || exitCode(err) != 2 {
		t.Errorf("hold set of a key no cell has: %v (exit %d), want not found, exit 2", err, exitCode(err))
	}
	for cell, db := range dbs {
		var kept []string
		db.Raw(`SELECT key FROM idempotency_keys k WHERE EXISTS (SELECT FROM key_responses r WHERE r.key_id = k.id) ORDER BY key`).Scan(&kept)
		if len(kept) != 1 || kept[0] != "new" {
			t.Errorf("cell %s keeps the responses of %v, want [new]", cell, kept)
		}
	}
}

// TestCellDaemons_AuditTheControlChain: a cell's daemon jobs append their audit rows to the
// control cell's chain (apart from the cell's own transaction), never to the cell's audit_log;
// the control cell's own replica uses its database's.
func TestCellDaemons_AuditTheControlChain(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	_, mapPath := twoCellMap(t, dir)
	set, dbs := openTestCells(t, mapPath, secret)
	b, _ := set.Cell("b")
	deps := cellDeps(daemonDeps{}, set, b)
	if deps.Audit == nil {
		t.Fatal("cell b's replica has no audit log of the control cell")
	}
	ctx := context.Background()
	err := dbs["b"].Transaction(func(tx *gorm.DB) error {
		return deps.Audit.Append(ctx, tx, audit.Entry{Actor: "daemon", Action: "test.cell_b", Tenants: []string{"globex"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := count(t, dbs["a"], `SELECT count(*) FROM audit_log WHERE action = 'test.cell_b'`), count(t, dbs["b"], `SELECT count(*) FROM audit_log`); a != 1 || b != 0 {
		t.Errorf("audit rows: control %d, cell b %d; want 1 and 0", a, b)
	}
	if res, err := audit.New(dbs["a"], secret).Verify(ctx, audit.VerifyOptions{}); err != nil || !res.OK() || res.Rows != 1 {
		t.Errorf("control chain: %+v %v", res, err)
	}
	a, _ := set.Cell("a")
	if deps := cellDeps(daemonDeps{}, set, a); deps.Audit != nil {
		t.Error("the control cell's replica should audit in its own database (Audit nil: newDaemon's default)")
	}
}
