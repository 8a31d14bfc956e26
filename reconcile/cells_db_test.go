package reconcile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// TestCells_AStatementIsMatchedInEveryCellOfItsAccountsTenants: with cells, the control cell
// fetches a job's statement once and each cell holding one of the channel account's tenants
// imports it and matches it against its own keys. A line whose key is in the other cell is no
// finding anywhere; a line no cell has a key for is one CHANNEL_ONLY, once; a key the statement
// does not list is LOCAL_ONLY in its own cell; the control's run sums the cells'.
func TestCells_AStatementIsMatchedInEveryCellOfItsAccountsTenants(t *testing.T) {
	var cells []reconcile.Cell
	a := setup(t, func(c *reconcile.Config) {
		c.Cells = func(tenants []string) ([]reconcile.Cell, error) {
			if !slices.Equal(tenants, []string{"t1", "t2"}) {
				t.Errorf("cells asked for tenants %v, want the account's [t1 t2]", tenants)
			}
			return cells, nil
		}
	})
	// Cell b: its own database, store and reconciler; tenant t2 lives there.
	dbB := pgtest.New(t)
	storeB, err := claim.NewStore(dbB, claim.Config{DigestSecret: []byte("test-secret-0123456789"), Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	recB, err := reconcile.New(dbB, reconcile.Config{Store: storeB, Operations: registry{a.op.Name(): a.op}, Auditor: a.audit})
	if err != nil {
		t.Fatal(err)
	}
	cells = []reconcile.Cell{{Name: "a", Rec: a.rec}, {Name: "b", Rec: recB}}
	if _, err := reconcile.SetChannelTenants(a.ctx, a.db, "wechat", []string{"t1", "t2"}, "test"); err != nil {
		t.Fatal(err)
	}

	inA := a.key("a1", 100, "CNY", claim.StateCompleted) // tenant t1, cell a
	keyInB := func(name string) (claim.Lease, int64) {
		out, err := storeB.Claim(a.ctx, claim.Request{Tenant: "t2", Operation: a.op.Name(), Key: name,
			Intent: json.RawMessage(`{"amount_minor": 200, "currency": "CNY", "payee": "acme"}`), Spec: a.op.Intent(), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("claim %s in cell b: %v %v", name, out, err)
		}
		if err := storeB.Complete(a.ctx, nil, out.Lease, &claim.Snapshot{Status: 201, ResourceID: "ch_" + name}); err != nil {
			t.Fatal(err)
		}
		pgtest.Exec(t, dbB, `UPDATE idempotency_keys SET completed_at = ? WHERE id = ?`, billDay.Add(10*time.Hour), out.KeyID)
		return *out.Lease, out.KeyID
	}
	inB, _ := keyInB("b1")
	_, unlisted := keyInB("b2") // completed in the bill date, not on the statement

	dir := t.TempDir()
	job := a.createJob("wechat-daily", filepath.Join(dir, "wechat_{yyyymmdd}.csv"), 0)
	file := wechatBill([]wechatLine{
		{At: billDay.Add(10 * time.Hour), Txn: "T-a1", Order: inA.DownstreamKey, Status: "SUCCESS", Amount: 100},
		{At: billDay.Add(10 * time.Hour), Txn: "T-b1", Order: inB.DownstreamKey, Status: "SUCCESS", Amount: 200},
		{At: billDay.Add(11 * time.Hour), Txn: "T-x", Order: "nobody-has-this-order", Status: "SUCCESS", Amount: 300},
	}, 0)
	if err := os.WriteFile(filepath.Join(dir, "wechat_20240301.csv"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := a.rec.RunJob(a.ctx, job, billDate, "daemon", nil)
	if err != nil {
		t.Fatal(err)
	}

	findings := func(db *gorm.DB) map[string]int64 {
		var rows []struct {
			Kind    string
			Subject string
			KeyID   *int64
		}
		if err := db.Raw(`SELECT kind, subject, key_id FROM discrepancies WHERE state = 'open'`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range rows {
			out[r.Kind+" "+r.Subject]++
		}
		return out
	}
	gotA, gotB := findings(a.db), findings(dbB)
	wantA := map[string]int64{"CHANNEL_ONLY txn:T-x": 1}
	wantB := map[string]int64{"LOCAL_ONLY key:" + strconv.FormatInt(unlisted, 10): 1}
	if !mapsEqual(gotA, wantA) || !mapsEqual(gotB, wantB) {
		t.Errorf("open findings: cell a %v, cell b %v; want a %v, b %v", gotA, gotB, wantA, wantB)
	}
	for name, db := range map[string]*gorm.DB{"a": a.db, "b": dbB} {
		var lines, statements int64
		db.Raw(`SELECT count(*) FROM statement_lines`).Scan(&lines)
		db.Raw(`SELECT count(*) FROM statements`).Scan(&statements)
		if lines != 3 || statements != 1 {
			t.Errorf("cell %s holds %d statements, %d lines; want the statement once, its 3 lines", name, statements, lines)
		}
	}
	var accountB []string
	dbB.Raw(`SELECT unnest(tenants) FROM channel_accounts WHERE channel = 'wechat'`).Scan(&accountB)
	if !slices.Equal(accountB, []string{"t1", "t2"}) {
		t.Errorf("cell b's copy of the channel account has tenants %v", accountB)
	}
	if run.Status != reconcile.RunSucceeded || run.Counts["CHANNEL_ONLY"] != 1 || run.Counts["LOCAL_ONLY"] != 1 || len(run.Counts) != 2 {
		t.Errorf("control run %s counts %v; want succeeded, 1 CHANNEL_ONLY + 1 LOCAL_ONLY", run.Status, run.Counts)
	}
}
