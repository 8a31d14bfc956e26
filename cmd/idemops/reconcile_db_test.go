package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestReconcileImport_ImportsOnceMatchesAndListsFindings(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", pgtest.URL(t)}
	run := func(args ...string) (string, error) {
		return runIdemops(t, append(append([]string{"reconcile"}, args...), db...)...)
	}
	_, err := run("jobs", "add", "--name", "wechat-daily", "--channel", "wechat", "--format", "wechat",
		"--source", "/bills/{date}.csv", "--operation", "payment.charge", "--cron", "0 61 * * *", "--tz", "Asia/Shanghai")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "cron_spec:") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("bad cron: %v", err)
	}
	// A local file source needs the file root, and must be under it.
	_, err = run("jobs", "add", "--name", "wechat-daily", "--channel", "wechat", "--format", "wechat",
		"--source", "/bills/{date}.csv", "--operation", "payment.charge", "--cron", "0 11 * * *", "--tz", "Asia/Shanghai")
	if err == nil || !strings.Contains(err.Error(), "source: refused by the statement-source policy: file sources are off (set --recon-file-root)") {
		t.Fatalf("file source without a root: %v", err)
	}
	out, err := run("jobs", "add", "--name", "wechat-daily", "--channel", "wechat", "--format", "wechat", "--recon-file-root", "/bills",
		"--source", "/bills/{date}.csv", "--operation", "payment.charge", "--cron", "0 11 * * *", "--tz", "Asia/Shanghai")
	if err != nil || strings.Count(out, ":00 CST\n") != 5 {
		t.Fatalf("jobs add: %v\n%s", err, out)
	}
	if out, err = run("jobs", "list"); err != nil || !strings.Contains(out, "wechat-daily") {
		t.Fatalf("jobs list: %v\n%s", err, out)
	}

	file := filepath.Join(statements, "wechat/all_trades.csv")
	out, err = run("import", "--job", "wechat-daily", file)
	if err != nil {
		t.Fatal(err)
	}
	// No local keys: every successful line is CHANNEL_ONLY (the refund line is not an order).
	for _, want := range []string{"run 1: succeeded, wechat 2024-03-01", "statement 1 (version 1): imported, 4 lines loaded, 0 matched",
		"CHANNEL_ONLY             3"} {
		if !strings.Contains(out, want) {
			t.Errorf("import output lacks %q:\n%s", want, out)
		}
	}
	out, err = run("import", "--job", "wechat-daily", file)
	if err != nil || !strings.Contains(out, "already imported; matched again") {
		t.Errorf("second import: %v\n%s", err, out)
	}
	out, err = run("findings", "--run", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("findings:\n%s", out)
	}
	var f struct {
		Kind    string `json:"kind"`
		State   string `json:"state"`
		Subject string `json:"subject"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &f); err != nil || f.Kind != "CHANNEL_ONLY" || f.State != "open" || !strings.HasPrefix(f.Subject, "txn:") {
		t.Errorf("finding %s (%v)", lines[0], err)
	}

	_, err = run("import", "--channel", "wechat", "--format", "wechat", filepath.Join(statements, "wechat/bad_amount.csv"))
	if err == nil || exitCode(err) != 1 || !strings.HasPrefix(err.Error(), "line 3: ") {
		t.Errorf("bad line: %v", err)
	}
	if _, err = run("findings", "--run", "99"); err == nil || exitCode(err) != 2 {
		t.Errorf("unknown run: %v", err)
	}
	if _, err = run("run", "--job", "nope"); err == nil || exitCode(err) != 2 {
		t.Errorf("unknown job: %v", err)
	}
}

// reconcile import and jobs add take a fee schedule: a bad one is a usage error naming the
// field; 60 bp agrees with the fixture's fees, 61 bp does not (FEE_MISMATCH per line it moves).
func TestReconcileImport_FeeSchedule(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", pgtest.URL(t)}
	run := func(args ...string) (string, error) {
		return runIdemops(t, append(append([]string{"reconcile"}, args...), db...)...)
	}
	_, err := run("jobs", "add", "--name", "wechat-fees", "--channel", "wechat", "--format", "wechat", "--source", "/bills/{date}.csv",
		"--operation", "payment.charge", "--cron", "0 11 * * *", "--tz", "Asia/Shanghai", "--fee-rate-bp", "60", "--fee-rounding", "nearest")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "fee_schedule.rounding") {
		t.Fatalf("bad rounding: %v", err)
	}
	file := filepath.Join(statements, "wechat/all_trades.csv")
	out, err := run("import", "--channel", "wechat", "--format", "wechat", "--fee-rate-bp", "60", file)
	if err != nil || strings.Contains(out, "FEE_MISMATCH") {
		t.Fatalf("60 bp: %v\n%s", err, out)
	}
	// 61 bp: 128.00 → 0.78 (not 0.77), 1234.56 → 7.53 (not 7.41), the 28.00 refund → -0.17 still.
	out, err = run("import", "--channel", "wechat", "--format", "wechat", "--fee-rate-bp", "61", file)
	if err != nil || !strings.Contains(out, "FEE_MISMATCH             2") {
		t.Fatalf("61 bp: %v\n%s", err, out)
	}
}
