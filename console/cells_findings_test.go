package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// runIn stores a finished run of channel stripe in db (one cell's), as a cell's reconciler
// leaves one.
func (b *cellsBundle) runIn(db *gorm.DB) int64 {
	b.t.Helper()
	var id int64
	if err := db.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor, rows_parsed, rows_loaded, rows_matched, counts, finished_at)
		VALUES ('stripe', '2024-03-01', 'succeeded', 'daemon', 3, 3, 2, '{}', now()) RETURNING id`).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}

// findingIn stores an open finding of run in db (key nil: one about the statement), with an
// amount of 1000 USD cents.
func (b *cellsBundle) findingIn(db *gorm.DB, run int64, kind, subject string, key *int64) int64 {
	b.t.Helper()
	var id int64
	if err := db.Raw(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id, detail)
		VALUES (?, ?, 'stripe', '2024-03-01', ?, ?, ?, '{"channel_amount_minor":1000,"channel_currency":"USD"}'::jsonb) RETURNING id`,
		run, run, kind, subject, key).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}

// allFindings are both cells' findings newest first by (created_at, id), of the tenants given
// (none: all), and the statement's own findings when withStatement.
func (b *cellsBundle) allFindings(withStatement bool, tenants ...string) []int64 {
	return b.newestFirst("discrepancies", func(tenant *string) bool {
		if tenant == nil {
			return withStatement
		}
		return len(tenants) == 0 || slices.Contains(tenants, *tenant)
	})
}

type apiFindingsPage struct {
	Findings []struct {
		ID int64 `json:"id"`
	} `json:"findings"`
	Next any `json:"next_before"`
}

// walkFindings pages through GET /api/v1/reconcile/findings?query with limit findings a page
// and returns the ids seen in order and the pages' sizes.
func (b *cellsBundle) walkFindings(c *client, tok, query string, limit int) (ids []int64, sizes []int) {
	return b.walkPages(c, tok, "/api/v1/reconcile/findings", "before", query, limit, "", func(got resp) ([]int64, string) {
		p := decode[apiFindingsPage](b.t, got)
		ids := make([]int64, len(p.Findings))
		for i, f := range p.Findings {
			ids[i] = f.ID
		}
		if p.Next == nil {
			return ids, ""
		}
		return ids, fmt.Sprint(p.Next)
	})
}

// TestCells_FindingsAcrossCells: findings live in the cell that matched the statement. The list
// asks every cell and merges them newest first by (created_at, id) — every page size walks the
// one order, each finding once, with created_at ties within and across cells — the groups, the
// tabs and the dashboard sum them, the export streams the merged order, an action goes to the
// finding's own cell with its audit row in the control database, and every operator stays
// within their tenants. A tenant move leaves its findings where they were: still listed.
func TestCells_FindingsAcrossCells(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("acme-op", access.RoleOperator, "acme")
	b.addOperator("globex-op", access.RoleOperator, "globex")
	b.setChannel("stripe", "acme", "globex")
	if err := b.cb.Exec(`INSERT INTO channel_accounts (channel, tenants, updated_by) VALUES ('stripe', '{acme,globex}', 'cells:control')`).Error; err != nil {
		t.Fatal(err)
	}

	// Cell a matched acme's keys (and holds the statement's own finding), cell b globex's.
	runA, runB := b.runIn(b.db), b.runIn(b.cb)
	var acmeF, globexF []int64
	for i := range 5 {
		k := b.seedIn(b.claims, "acme", fmt.Sprintf("fa-%d", i), true)
		acmeF = append(acmeF, b.findingIn(b.db, runA, "LOCAL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID))
	}
	for i := range 6 {
		k := b.seedIn(b.claimB, "globex", fmt.Sprintf("fg-%d", i), true)
		globexF = append(globexF, b.findingIn(b.cb, runB, "LOCAL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID))
	}
	stmt := b.findingIn(b.db, runA, "CHANNEL_ONLY", "txn:nobody", nil)
	if globexF[0] < 1<<40 || acmeF[0] >= 1<<40 {
		t.Fatalf("finding ids: a %d, b %d: the cells' id ranges are not set", acmeF[0], globexF[0])
	}
	// created_at interleaves the cells, two findings a second in each, the same seconds in both
	// (each cell's ids in time order, as a sequence gives them): a merge by id alone fails.
	at := `UPDATE discrepancies d SET created_at = timestamptz '2026-12-01 12:00:00+00' - (s.n / 2) * interval '1 second'
		FROM (SELECT id, row_number() OVER (ORDER BY id DESC) AS n FROM discrepancies) s WHERE s.id = d.id`
	b.exec(at)
	if err := b.cb.Exec(at).Error; err != nil {
		t.Fatal(err)
	}

	root, rootTok := b.signIn("root"), b.token("root")
	want := b.allFindings(true)
	if len(want) != 12 {
		t.Fatalf("seeded %d findings, want 12", len(want))
	}
	for _, limit := range []int{1, 2, 5, 50} {
		got, sizes := b.walkFindings(root, rootTok, "", limit)
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: walk %v\nwant        %v", limit, got, want)
		}
		for i, n := range sizes[:len(sizes)-1] {
			if n != limit {
				t.Errorf("limit %d: page %d has %d findings", limit, i, n)
			}
		}
	}
	// The page's next link carries the cells' positions and opens the rest.
	page := root.get("/reconcile/findings?view=list&limit=4")
	mustContain(t, "findings page", page.Body, fmt.Sprintf("finding-%d", want[0]), fmt.Sprintf("finding-%d", want[3]))
	next := root.get("/reconcile/findings?view=list&limit=4&before=" + url.QueryEscape(b.cursorAfter(want[:4])))
	if next.Status != 200 {
		t.Fatalf("second page: %d %s", next.Status, truncate(next.Body, 300))
	}
	mustContain(t, "second page", next.Body, fmt.Sprintf("finding-%d", want[4]), fmt.Sprintf("finding-%d", want[7]))
	mustNotContain(t, "second page", next.Body, fmt.Sprintf("finding-%d\"", want[3]))
	if got := root.api("/api/v1/reconcile/findings?before=a:x", rootTok); got.Status != 400 {
		t.Errorf("a malformed cursor of cells: %d, want 400", got.Status)
	}

	// Scope: each operator sees their tenant's findings, in whichever cell (the statement's own
	// finding is its channel account's, acme's and globex's: an operator of both sees it).
	acme, acmeTok := b.signIn("acme-op"), b.token("acme-op")
	globex, globexTok := b.signIn("globex-op"), b.token("globex-op")
	if got, _ := b.walkFindings(acme, acmeTok, "", 3); !slices.Equal(got, b.allFindings(false, "acme")) {
		t.Errorf("acme operator: %v, want %v", got, b.allFindings(false, "acme"))
	}
	if got, _ := b.walkFindings(globex, globexTok, "", 3); !slices.Equal(got, b.allFindings(false, "globex")) {
		t.Errorf("globex operator: %v, want %v", got, b.allFindings(false, "globex"))
	}

	// Groups, tabs and the dashboard sum the cells.
	ctx := access.Bind(context.Background(), b.ops["root"])
	groups, _, err := b.srv.findingCounts(ctx, b.ops["root"], reconcile.FindingFilter{State: reconcile.FindingOpen})
	if err != nil {
		t.Fatal(err)
	}
	fg, _ := findingGroups(findingSearchOf(t), groups, reconcile.FindingOpen)
	byKind := map[string]int64{}
	for _, g := range fg {
		byKind[g.Kind] = g.N
		if g.Kind == "LOCAL_ONLY" && (len(g.Amounts) != 1 || !strings.Contains(g.Amounts[0], "110")) {
			t.Errorf("LOCAL_ONLY group amounts %v, want 110.00 USD", g.Amounts)
		}
	}
	if byKind["LOCAL_ONLY"] != 11 || byKind["CHANNEL_ONLY"] != 1 {
		t.Errorf("groups: %v, want LOCAL_ONLY 11 (5 in a, 6 in b), CHANNEL_ONLY 1", byKind)
	}
	type dash struct {
		Attention map[string]int64 `json:"attention"`
	}
	for _, tc := range []struct {
		who, tok string
		open     int64
	}{{"root", rootTok, 12}, {"acme-op", acmeTok, 5}, {"globex-op", globexTok, 6}} {
		if d := decode[dash](t, b.client().api("/api/v1/dashboard", tc.tok)); d.Attention["open_findings"] != tc.open {
			t.Errorf("%s dashboard: open findings %d, want %d", tc.who, d.Attention["open_findings"], tc.open)
		}
	}
	gp := root.get("/reconcile/findings").Body
	mustContain(t, "grouped page", gp, "12 findings in 2 groups")

	// Export: the merged order, every cell's rows.
	exp := root.api("/api/v1/reconcile/findings/export?format=csv", rootTok)
	if exp.Status != 200 {
		t.Fatalf("export: %d %s", exp.Status, truncate(exp.Body, 300))
	}
	recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix([]byte(exp.Body), []byte("\ufeff")))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var exported []int64
	for _, rec := range recs[1:] {
		id, _ := strconv.ParseInt(rec[0], 10, 64)
		exported = append(exported, id)
	}
	if !slices.Equal(exported, want) {
		t.Errorf("export: %v\nwant    %v", exported, want)
	}
	if exp := acme.api("/api/v1/reconcile/findings/export?format=csv", acmeTok); strings.Contains(exp.Body, fmt.Sprint(globexF[0])) {
		t.Errorf("acme's export holds globex's finding %d", globexF[0])
	}

	// An action goes to the finding's cell; its audit row to the control database.
	path := fmt.Sprintf("/api/v1/reconcile/findings/%d/resolve", globexF[2])
	body := map[string]string{"reason_code": "refunded_at_channel", "note": "refunded on the 2nd"}
	if got := acme.apiPost(path, acmeTok, body); got.Status != 404 {
		t.Errorf("acme operator resolves globex's finding: %d, want 404", got.Status)
	}
	if got := globex.apiPost(path, globexTok, body); got.Status != 200 {
		t.Fatalf("globex operator resolves its finding in cell b: %d %s", got.Status, truncate(got.Body, 300))
	}
	var state string
	b.cb.Raw(`SELECT state FROM discrepancies WHERE id = ?`, globexF[2]).Scan(&state)
	if state != "resolved" {
		t.Errorf("the finding in cell b is %q, want resolved", state)
	}
	target := fmt.Sprintf("finding:%d", globexF[2])
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'reconcile.finding.resolve' AND target = ? AND 'globex' = ANY(tenants)`, target); n != 1 {
		t.Errorf("resolve: %d audit rows under globex in the control database, want 1", n)
	}
	var inB int64
	b.cb.Raw(`SELECT count(*) FROM audit_log`).Scan(&inB)
	if inB != 0 {
		t.Errorf("cell b has %d audit rows, want none", inB)
	}
	// The page's form acts in the cell too, and the run and its line are read from there.
	if got := globex.post(fmt.Sprintf("/reconcile/findings/%d/ignore", globexF[3]), url.Values{"reason_code": {"test_transaction"},
		"note": {"seen twice"}}, true); got.Status != 303 {
		t.Errorf("ignore through the page in cell b: %d %s", got.Status, truncate(got.Body, 300))
	}
	// (A run is its channel account's, acme's and globex's: an operator of one sees none.)
	if got := root.get(fmt.Sprintf("/reconcile/runs/%d", runB)); got.Status != 200 {
		t.Errorf("cell b's run page: %d", got.Status)
	}
	for _, q := range []string{`INSERT INTO statements (channel, bill_date, format, sha256, version, row_count, total_minor, bytes, summary, importer)
		VALUES ('stripe', '2024-03-01', 'stripe', 'cellb', 1, 1, 1000, 10, '{}', 'test')`,
		`INSERT INTO statement_lines (statement_id, line_no, channel_txn_id, merchant_order_no, amount_minor, currency, status, occurred_at, raw)
		SELECT id, 1, 'txn-only-in-cell-b', '', 1000, 'USD', 'success', now(), 'raw' FROM statements`,
		`UPDATE recon_runs SET statement_id = (SELECT id FROM statements)`} {
		if err := b.cb.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	if got := root.get(fmt.Sprintf("/reconcile/runs/%d/line?n=1", runB)); got.Status != 200 || !strings.Contains(got.Body, "txn-only-in-cell-b") {
		t.Errorf("cell b's run, line 1: %d, want the line of cell b's statement", got.Status)
	}
	if got := acme.get(fmt.Sprintf("/reconcile/runs/%d", runB)); got.Status != 404 {
		t.Errorf("cell b's run page for acme's operator: %d, want 404", got.Status)
	}
	// The key page of a globex key lists its finding from cell b.
	var keyB int64
	b.cb.Raw(`SELECT key_id FROM discrepancies WHERE id = ?`, globexF[0]).Scan(&keyB)
	mustContain(t, "key page (cell b)", globex.get(fmt.Sprintf("/keys/%d", keyB)).Body, fmt.Sprintf("finding-%d", globexF[0]))

	// globex moves to cell a: its findings stay in cell b, and are still listed.
	b.cells.move("globex", "a")
	if got, _ := b.walkFindings(globex, globexTok, "", 50); !slices.Equal(got, b.allFindings(false, "globex")) {
		t.Errorf("after the move: %v, want %v", got, b.allFindings(false, "globex"))
	}
	if got := globex.apiPost(fmt.Sprintf("/api/v1/reconcile/findings/%d/resolve", globexF[4]), globexTok, body); got.Status != 200 {
		t.Errorf("resolve a finding left in cell b after the move: %d %s", got.Status, truncate(got.Body, 300))
	}
	_ = stmt
}

// cursorAfter is the cursor of cells after the findings shown (ids of both cells).
func (b *cellsBundle) cursorAfter(shown []int64) string {
	p := cellsPos{}
	for _, id := range shown {
		name := "a"
		if id >= 1<<40 {
			name = "b"
		}
		p[name] = min(cmp.Or(p[name], id), id)
	}
	return p.String()
}

// findingSearchOf is the search of an empty findings filter.
func findingSearchOf(t *testing.T) templates.FindingSearch {
	t.Helper()
	_, fs, err := parseFindingFilter(url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestCells_FindingsBulkAcrossCells: a bulk action over findings in two cells previews their sum
// (count, amounts, a merged sample, the newest finding seen in each cell), starts one run in
// each cell — both waiting for a second operator since together they pass the threshold, though
// neither does alone — is approved run by run, is worked by each cell's daemon, and leaves alone
// a finding that came after the preview. Runs are listed and opened across cells; their audit
// rows are in the control database.
func TestCells_FindingsBulkAcrossCells(t *testing.T) {
	b := setupCells(t, func(cfg *Config) { cfg.Reconcile.BulkApprovalAbove = 5 })
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("root2", access.RoleAdmin, "*")
	b.setChannel("stripe", "acme", "globex")
	if err := b.cb.Exec(`INSERT INTO channel_accounts (channel, tenants, updated_by) VALUES ('stripe', '{acme,globex}', 'cells:control')`).Error; err != nil {
		t.Fatal(err)
	}
	runA, runB := b.runIn(b.db), b.runIn(b.cb)
	for i := range 4 {
		k := b.seedIn(b.claims, "acme", fmt.Sprintf("ba-%d", i), true)
		b.findingIn(b.db, runA, "LOCAL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID)
		k = b.seedIn(b.claimB, "globex", fmt.Sprintf("bg-%d", i), true)
		b.findingIn(b.cb, runB, "LOCAL_ONLY", fmt.Sprintf("key:%d", k.ID), &k.ID)
	}
	root, tok := b.signIn("root"), b.token("root")
	body := map[string]any{"filter": map[string]any{"kind": "LOCAL_ONLY"}, "action": "ignore", "reason_code": "test_transaction",
		"note": "two cells", "preview": true}
	type preview struct {
		Count         int64                `json:"count"`
		Amounts       map[string]int64     `json:"amounts"`
		Sample        []struct{ ID int64 } `json:"sample"`
		UpTo          string               `json:"upto"`
		NeedsApproval bool                 `json:"needs_approval"`
	}
	got := root.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	if got.Status != 200 {
		t.Fatalf("preview: %d %s", got.Status, truncate(got.Body, 300))
	}
	p := decode[preview](t, got)
	wantUpTo := b.cursorAfter([]int64{b.newestFinding(b.db), b.newestFinding(b.cb)})
	if p.Count != 8 || p.Amounts["USD"] != 8000 || len(p.Sample) != 8 || p.UpTo != wantUpTo || !p.NeedsApproval {
		t.Fatalf("preview: %+v, want 8 findings, 8000 USD cents, 8 in the sample, upto %s, needs approval", p, wantUpTo)
	}
	page := root.post("/reconcile/findings/bulk", url.Values{"scope": {"all"}, "kind": {"LOCAL_ONLY"}}, true)
	mustContain(t, "preview page", page.Body, `name="upto" value="`+wantUpTo+`"`)

	// A finding that comes after the preview is not the run's.
	late := b.seedIn(b.claimB, "globex", "bg-late", true)
	lateF := b.findingIn(b.cb, runB, "LOCAL_ONLY", fmt.Sprintf("key:%d", late.ID), &late.ID)

	body["preview"], body["upto"] = false, p.UpTo
	got = root.apiPost("/api/v1/reconcile/findings/bulk", tok, body)
	type runs struct {
		Runs []struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
			Total int64  `json:"total"`
		} `json:"runs"`
	}
	if got.Status != 202 {
		t.Fatalf("start: %d %s", got.Status, truncate(got.Body, 300))
	}
	started := decode[runs](t, got)
	if len(started.Runs) != 2 {
		t.Fatalf("start: %s, want a run in each cell", truncate(got.Body, 300))
	}
	for _, r := range started.Runs {
		if r.State != reconcile.BulkPendingApproval || r.Total != 4 {
			t.Errorf("run %d: %s with %d findings, want pending_approval with 4 (4 + 4 > 5 together)", r.ID, r.State, r.Total)
		}
	}
	if started.Runs[1].ID < 1<<40 {
		t.Errorf("the second run %d is not cell b's", started.Runs[1].ID)
	}
	list := root.get("/reconcile/findings/bulk").Body
	root2, tok2 := b.signIn("root2"), b.token("root2")
	for _, r := range started.Runs {
		mustContain(t, "bulk runs page", list, fmt.Sprintf("/reconcile/findings/bulk/%d", r.ID))
		path := fmt.Sprintf("/api/v1/reconcile/findings/bulk/%d/approve", r.ID)
		if got := root.apiPost(path, tok, nil); got.Status != 409 {
			t.Errorf("the starter approves run %d: %d, want 409", r.ID, got.Status)
		}
		if got := root2.apiPost(path, tok2, nil); got.Status != 200 || !strings.Contains(got.Body, `"state":"running"`) {
			t.Errorf("a second operator approves run %d: %d %s", r.ID, got.Status, truncate(got.Body, 200))
		}
	}
	b.runJobs()
	startReplica(t, b.cb, "replica-b", map[daemon.Job]string{reconcile.NewBulkJob(b.srv.cells.byName["b"].recon): reconcile.BulkJobSpec})
	for i, db := range []*gorm.DB{b.db, b.cb} {
		id := started.Runs[i].ID
		pgtest.Await(t, db, 15*time.Second, fmt.Sprintf("bulk run %d to finish", id), func() bool {
			var n int64
			db.Raw(`SELECT count(*) FROM finding_bulk_runs WHERE id = ? AND state = 'done'`, id).Scan(&n)
			return n == 1
		}, "finding_bulk_runs")
	}
	for name, db := range map[string]*gorm.DB{"a": b.db, "b": b.cb} {
		var n int64
		db.Raw(`SELECT count(*) FROM discrepancies WHERE state = 'ignored' AND note = 'two cells'`).Scan(&n)
		if n != 4 {
			t.Errorf("cell %s: %d findings ignored, want 4", name, n)
		}
	}
	var lateState string
	b.cb.Raw(`SELECT state FROM discrepancies WHERE id = ?`, lateF).Scan(&lateState)
	if lateState != "open" {
		t.Errorf("the finding after the preview is %s, want open", lateState)
	}
	if got := root.api(fmt.Sprintf("/api/v1/reconcile/findings/bulk/%d", started.Runs[1].ID), tok); !strings.Contains(got.Body, `"processed":4`) {
		t.Errorf("cell b's run afterwards: %d %s", got.Status, truncate(got.Body, 300))
	}
	for action, want := range map[string]int64{"reconcile.findings.bulk_start": 2, "reconcile.findings.bulk_approve": 2, "reconcile.finding.ignore": 8} {
		if n := b.count(`SELECT count(*) FROM audit_log WHERE action = ?`, action); n != want {
			t.Errorf("%s: %d audit rows in the control database, want %d", action, n, want)
		}
	}
	var inB int64
	b.cb.Raw(`SELECT count(*) FROM audit_log`).Scan(&inB)
	if inB != 0 {
		t.Errorf("cell b holds %d audit rows, want none", inB)
	}
}

// newestFinding is db's newest finding id.
func (b *cellsBundle) newestFinding(db *gorm.DB) int64 {
	b.t.Helper()
	var id int64
	if err := db.Raw(`SELECT max(id) FROM discrepancies`).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}
