package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// dataDirWithSecret is a --data-dir for t holding secret as its digest secret.
func dataDirWithSecret(t *testing.T, secret []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "digest-secret"), append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runIdemopsIn is runIdemops with stdin.
func runIdemopsIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := execute(context.Background(), root)
	return out.String(), err
}

// TestOperatorCLI_KeysAndReplaysWithinTheOperatorsTenants: `keys`, `replay` and `findings` act
// as the operator whose token they hold, within that operator's tenants (another tenant's key is
// not found), or as every tenant with the database URL alone; a replay goes through the
// console's workflow — preview token, reason, a second operator's approval above the threshold —
// and completes the key from what downstream already holds; the raw key for `keys find` comes
// from stdin.
func TestOperatorCLI_KeysAndReplaysWithinTheOperatorsTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	db := pgtest.Open(t, dbURL)
	secret := []byte("operator-cli-test-secret-01")
	dir := dataDirWithSecret(t, secret)
	sim, ts, opsFile := paysimWithOps(t, dir)

	// Three keys whose first attempt failed retryably after the charge reached paysim: a small
	// and a large acme payment (the large one above the approval threshold), and a globex one.
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	spec := claim.IntentSpec{Ignore: []string{"description", "client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"}
	client := paysim.NewClient(ts.URL, ts.Client())
	makeKey := func(tenant, key string, amount int64) int64 {
		body := fmt.Sprintf(`{"amount_minor":%d,"currency":"CNY","payee":"alice"}`, amount)
		out, err := store.Claim(ctx, claim.Request{Tenant: tenant, Operation: "payment.charge.http", Key: key,
			Intent: json.RawMessage(body), Spec: spec, Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("claim %s: %+v %v", key, out, err)
		}
		dk := out.Lease.DownstreamKey
		if _, err := client.CreateCharge(ctx, dk, paysim.ChargeRequest{AmountMinor: amount, Currency: "CNY", MerchantOrderNo: dk, Payee: "alice"}, ""); err != nil {
			t.Fatal(err)
		}
		if err := store.Fail(ctx, nil, out.Lease, &claim.Failure{Code: "timeout", Detail: "answer lost", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		return out.KeyID
	}
	small, large, other := makeKey("acme", "cli-small", 250), makeKey("acme", "cli-large", 500000), makeKey("globex", "cli-other", 300)

	ops := access.NewOperators(db, access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, secret))
	tokenFile := func(name string) string {
		if _, err := ops.Add(ctx, access.Change{Actor: "operator:test"}, access.NewOperator{Name: name,
			Password: "a long password 123", Role: access.RoleOperator, Tenants: []string{"acme"}}); err != nil {
			t.Fatal(err)
		}
		tok, err := ops.CreateToken(ctx, access.Change{Actor: "operator:test"}, name, "cli", 0)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".token")
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	alice, bob := tokenFile("alice"), tokenFile("bob")
	common := []string{"--database-url", dbURL, "--data-dir", dir, "--operations", opsFile}
	run := func(stdin string, args ...string) (string, error) {
		return runIdemopsIn(t, stdin, append(args, common...)...)
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v (exit %d)", err, exitCode(err))
		}
		return out
	}
	idsOf := func(out string) map[int64]bool {
		got := map[int64]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var k struct{ ID int64 }
			if line != "" && json.Unmarshal([]byte(line), &k) == nil {
				got[k.ID] = true
			}
		}
		return got
	}

	// The database URL alone sees every tenant; alice's token acme's keys only.
	if got := idsOf(must(run("", "keys", "search", "--json"))); !got[small] || !got[large] || !got[other] {
		t.Errorf("keys search with the database URL: %v; want all three keys", got)
	}
	if got := idsOf(must(run("", "keys", "search", "--json", "--token-file", alice))); !got[small] || !got[large] || got[other] {
		t.Errorf("keys search as alice (acme): %v; want %d and %d, not globex's %d", got, small, large, other)
	}
	if _, err := run("", "keys", "show", fmt.Sprint(other), "--token-file", alice); exitCode(err) != 2 || !strings.Contains(err.Error(), "not found") {
		t.Errorf("alice shows globex's key: %v (exit %d); want not found, exit 2", err, exitCode(err))
	}
	var shown shownKey
	if err := json.Unmarshal([]byte(must(run("", "keys", "show", fmt.Sprint(small), "--json", "--token-file", alice))), &shown); err != nil ||
		shown.State != claim.StateFailedRetryable || len(shown.Events) == 0 {
		t.Errorf("keys show: %+v %v", shown, err)
	}
	if got := idsOf(must(run("cli-small\n", "keys", "find", "--json"))); len(got) != 1 || !got[small] {
		t.Errorf("keys find cli-small (stdin): %v; want key %d", got, small)
	}
	if got := idsOf(must(run("cli-other\n", "keys", "find", "--json", "--token-file", alice))); len(got) != 0 {
		t.Errorf("alice finds globex's key by its raw key: %v", got)
	}
	if _, err := run("", "keys", "find"); exitCode(err) != 2 {
		t.Errorf("keys find with nothing on stdin: %v (exit %d); want exit 2", err, exitCode(err))
	}

	// Replays need a named operator, and follow the console's workflow.
	if _, err := run("", "replay", "preview", fmt.Sprint(small)); exitCode(err) != 2 || !strings.Contains(err.Error(), "IDEMOPS_TOKEN") {
		t.Errorf("replay preview without a token: %v (exit %d); want exit 2 naming IDEMOPS_TOKEN", err, exitCode(err))
	}
	confirm := regexp.MustCompile(`--confirm (\S+)`)
	request := func(keyID int64, as string) string {
		t.Helper()
		m := confirm.FindStringSubmatch(must(run("", "replay", "preview", fmt.Sprint(keyID), "--token-file", as)))
		if m == nil {
			t.Fatalf("replay preview %d printed no confirmation token", keyID)
		}
		return must(run("", "replay", "request", fmt.Sprint(keyID), "--confirm", m[1], "--reason", "answer lost in transit", "--json", "--token-file", as))
	}
	stateOf := func(id int64) claim.State {
		k, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return k.State
	}
	request(small, alice)
	if st := stateOf(small); st != claim.StateCompleted || sim.ChargeCount(claim.DownstreamKey("acme", "payment.charge.http", "cli-small")) != 1 {
		t.Errorf("after the small replay: key %s; want completed from the charge paysim held, not a second charge", st)
	}
	var req struct {
		ID            int64
		State         string
		NeedsApproval bool `json:"needs_approval"`
	}
	if err := json.Unmarshal([]byte(request(large, alice)), &req); err != nil || !req.NeedsApproval || req.State != "pending" {
		t.Fatalf("large replay request: %+v %v; want pending approval", req, err)
	}
	if _, err := run("", "replay", "approve", fmt.Sprint(req.ID), "--token-file", alice); err == nil || !strings.Contains(err.Error(), "second operator") {
		t.Errorf("alice approves her own request: %v; want refused: a second operator must approve", err)
	}
	must(run("", "replay", "approve", fmt.Sprint(req.ID), "--token-file", bob))
	if st := stateOf(large); st != claim.StateCompleted {
		t.Errorf("after bob's approval the large key is %s; want completed", st)
	}

	if out := must(run("", "findings", "list", "--json")); strings.TrimSpace(out) != "" {
		t.Errorf("findings list on a database without reconciliation: %q", out)
	}
}

// TestCLI_BadInputExits2WithOneLine: every refusal of the command line itself — an unknown
// command, a wrong argument count, an unknown or missing flag, a malformed value — exits 2 with
// one line, before any database is reached; an unreachable database exits 1 and keeps its cause.
func TestCLI_BadInputExits2WithOneLine(t *testing.T) {
	t.Parallel()
	dir := dataDirWithSecret(t, []byte("bad-input-test-secret-01"))
	nowhere := []string{"--database-url", "postgres://idemops@127.0.0.1:1/none?connect_timeout=1", "--data-dir", dir}
	for _, args := range [][]string{
		{"kyes"},
		{"keys", "serch"},
		{"keys", "show"},
		{"keys", "show", "1", "2"},
		{"keys", "show", "x"},
		{"keys", "search", "--bogus"},
		{"keys", "search", "--state", "nope"},
		{"keys", "search", "--limit", "0"},
		{"replay", "request", "1"},
		{"replay", "approve"},
		{"findings", "list", "--limit", "0"},
		{"findings", "nope"},
		{"findings", "bulk", "--action", "nope", "--reason-code", "other"},
		{"findings", "bulk", "--action", "ignore"},
		{"findings", "bulk", "--action", "ignore", "--reason-code", "other", "--start"},
		{"findings", "export", "--format", "pdf"},
		{"findings", "export", "--format", "xlsx"},
		{"audit", "verify", "extra"},
		{"migrate", "sideways"},
	} {
		_, err := runIdemops(t, append(args, nowhere...)...)
		if err == nil || exitCode(err) != 2 || strings.Contains(oneLine(err), "\n") {
			t.Errorf("%v: %v (exit %d); want exit 2, one line", args, err, exitCode(err))
		}
	}
	_, err := runIdemops(t, append([]string{"keys", "search"}, nowhere...)...)
	if err == nil || exitCode(err) != 1 || !strings.Contains(oneLine(err), "connection refused") {
		t.Errorf("an unreachable database: %v (exit %d); want exit 1 with its cause", err, exitCode(err))
	}
}
