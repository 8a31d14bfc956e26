package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream/paysim"
)

// paysimWithOps starts a paysim for t and writes dir/ops.yaml, the operations file of
// downstream/testdata pointed at it.
func paysimWithOps(t *testing.T, dir string) (*paysim.Server, *httptest.Server, string) {
	t.Helper()
	sim, err := paysim.NewServer(paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { ts.Close(); sim.Close() })
	raw, err := os.ReadFile("../../downstream/testdata/paysim-ops.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opsFile := filepath.Join(dir, "ops.yaml")
	if err := os.WriteFile(opsFile, []byte(strings.ReplaceAll(string(raw), "http://127.0.0.1:8090", ts.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	return sim, ts, opsFile
}

// TestReplayWithCells_ReplaysAKeyInItsOwnCellAuditedInTheControlCell: `replay preview` and
// `replay request` with --cells find a key of cell b, replay it there (completed from the charge
// paysim already holds, not charged again) and audit it in the control cell's chain, as the
// console does; without the map the control cell alone does not have the key.
func TestReplayWithCells_ReplaysAKeyInItsOwnCellAuditedInTheControlCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("cells-replay-secret-0123")
	dir := dataDirWithSecret(t, secret)
	urls, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	sim, ts, opsFile := paysimWithOps(t, dir)
	// globex's key in cell b: its first attempt failed retryably after the charge reached paysim.
	store, err := claim.NewStore(dbs["b"], claim.Config{DigestSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	spec := claim.IntentSpec{Ignore: []string{"description", "client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"}
	out, err := store.Claim(ctx, claim.Request{Tenant: "globex", Operation: "payment.charge.http", Key: "cell-b",
		Intent: json.RawMessage(`{"amount_minor":250,"currency":"CNY","payee":"alice"}`), Spec: spec, Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", out, err)
	}
	dk := out.Lease.DownstreamKey
	if _, err := paysim.NewClient(ts.URL, ts.Client()).CreateCharge(ctx, dk, paysim.ChargeRequest{AmountMinor: 250, Currency: "CNY", MerchantOrderNo: dk, Payee: "alice"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := store.Fail(ctx, nil, out.Lease, &claim.Failure{Code: "timeout", Detail: "answer lost", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	// Operators live in the control cell.
	ops := access.NewOperators(dbs["a"], access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(dbs["a"], secret))
	if _, err := ops.Add(ctx, access.Change{Actor: "operator:test"}, access.NewOperator{Name: "alice",
		Password: "a long password 123", Role: access.RoleOperator, Tenants: []string{"globex"}}); err != nil {
		t.Fatal(err)
	}
	tok, err := ops.CreateToken(ctx, access.Change{Actor: "operator:test"}, "alice", "cli", 0)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "alice.token")
	if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	replay := func(where []string, args ...string) (string, error) {
		return runIdemops(t, append(append(append([]string{"replay"}, args...), "--token-file", tokenFile, "--operations", opsFile, "--data-dir", dir), where...)...)
	}
	if _, err := replay([]string{"--database-url", urls["a"]}, "preview", fmt.Sprint(out.KeyID)); exitCode(err) != 2 {
		t.Errorf("replay preview of cell b's key on cell a alone: %v (exit %d); want not found", err, exitCode(err))
	}
	cellsFlag := []string{"--cells", mapPath}
	preview, err := replay(cellsFlag, "preview", fmt.Sprint(out.KeyID))
	m := regexp.MustCompile(`--confirm (\S+)`).FindStringSubmatch(preview)
	if err != nil || m == nil {
		t.Fatalf("replay preview --cells: %v\n%s", err, preview)
	}
	if got, err := replay(cellsFlag, "request", fmt.Sprint(out.KeyID), "--confirm", m[1], "--reason", "answer lost in transit"); err != nil {
		t.Fatalf("replay request --cells: %v\n%s", err, got)
	}
	k, err := store.Get(ctx, out.KeyID)
	if err != nil || k.State != claim.StateCompleted || sim.ChargeCount(dk) != 1 {
		t.Errorf("cell b's key after the replay: %v %v, %d charges; want completed from the charge paysim held", k.State, err, sim.ChargeCount(dk))
	}
	if a, b := count(t, dbs["a"], `SELECT count(*) FROM audit_log WHERE action LIKE 'replay%'`), count(t, dbs["b"], `SELECT count(*) FROM audit_log`); a == 0 || b != 0 {
		t.Errorf("replay audit rows: control %d, cell b %d; want them in the control cell only", a, b)
	}
}
