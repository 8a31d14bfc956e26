package reconcile_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// TestMatch_OnlyKeysOfTheChannelAccountsTenants: matching a statement of a channel account that
// belongs to other tenants than the keys' opens no finding on those keys — their lines are lines
// without a key, and none of them is LOCAL_ONLY — while the account of the keys' tenant finds
// exactly what it found before accounts had tenants.
func TestMatch_OnlyKeysOfTheChannelAccountsTenants(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	setTenants := func(tenants ...string) {
		t.Helper()
		if err := b.db.Transaction(func(tx *gorm.DB) error {
			_, err := reconcile.SetChannelTenants(b.ctx, tx, "wechat", tenants, "test")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	setTenants("t2", "t3") // the keys are t1's
	run, err := b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE run_id = ? AND key_id IS NOT NULL`, run.ID); n != 0 {
		t.Fatalf("%d findings on keys of a tenant outside the channel account", n)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE run_id = ? AND (kind = 'LOCAL_ONLY' OR subject LIKE 'key:%')`, run.ID); n != 0 {
		t.Fatalf("%d findings name a key of another tenant", n)
	}
	if run.RowsMatched != 0 || run.Counts["CHANNEL_ONLY"] == 0 {
		t.Errorf("run matched %d lines, counts %v: want every line without a key", run.RowsMatched, run.Counts)
	}

	// The keys' own tenant: the findings of the world, exactly (the statement is removed first,
	// so the import of the same file is not a no-op).
	setTenants("t1")
	for _, q := range []string{`DELETE FROM discrepancies`, `DELETE FROM statement_lines`, `DELETE FROM statements`} {
		pgtest.Exec(t, b.db, q)
	}
	run, err = b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, names := b.findings(run.ID)
	sort.Strings(names)
	if !slices.Equal(names, w.want) {
		t.Fatalf("findings with the keys' tenant\n got %q\nwant %q", names, w.want)
	}

	// Tenant lists are validated, and "*" stands alone.
	for _, bad := range [][]string{{}, {" "}, {"a|b"}, {"x\x00"}} {
		if _, err := reconcile.NormalizeTenants(bad); err == nil || !strings.Contains(err.Error(), "tenants") {
			t.Errorf("NormalizeTenants(%q): %v", bad, err)
		}
	}
	if got, _ := reconcile.NormalizeTenants([]string{"b", "*", "a"}); !slices.Equal(got, []string{"*"}) {
		t.Errorf("NormalizeTenants with *: %q", got)
	}
	accounts, err := b.rec.ListChannelAccounts(b.ctx)
	if err != nil || len(accounts) != 1 || accounts[0].Channel != "wechat" || !slices.Equal(accounts[0].Tenants, []string{"t1"}) {
		t.Errorf("accounts %+v, %v", accounts, err)
	}
}

// TestMatch_LeanPlanReadsOnlyTheAccountsTenants: the lean plan (a statement without repeated
// txn ids or order numbers) keeps to the channel account's tenants as the full plan does.
func TestMatch_LeanPlanReadsOnlyTheAccountsTenants(t *testing.T) {
	b := setup(t)
	at := func(h int) time.Time { return billDay.Add(time.Duration(h) * time.Hour) }
	ok := b.key("lean-ok", 10000, "CNY", claim.StateCompleted)
	b.key("lean-local-only", 20000, "CNY", claim.StateCompleted)
	lines := []wechatLine{{At: at(9), Txn: "4200000101", Order: ok.DownstreamKey, Status: "SUCCESS", Amount: 10000}}
	job := b.createJob("wechat-lean", "/nonexistent/{date}.csv", 0)
	if err := b.db.Transaction(func(tx *gorm.DB) error {
		_, err := reconcile.SetChannelTenants(b.ctx, tx, "wechat", []string{"t2"}, "test")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	run, err := b.reconcileFile(job, wechatBill(lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, names := b.findings(run.ID)
	if !slices.Equal(names, []string{"CHANNEL_ONLY txn:4200000101"}) {
		t.Fatalf("findings of an account of t2 over t1's keys: %q", names)
	}
}
