package reconcile_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// seedFindings inserts n open findings of kind on channel for the bill date, each about an
// amount of currency (100, 200, … minor units) with merchant order numbers prefix-1…n, found by
// one run; it returns their ids, oldest first.
func (b *bundle) seedFindings(n int, kind reconcile.Kind, channel, currency, prefix string) []int64 {
	b.t.Helper()
	run, err := b.rec.StartRun(b.ctx, nil, channel, billDate, "test")
	if err != nil {
		b.t.Fatal(err)
	}
	var ids []int64
	if err := b.db.Raw(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail)
		SELECT ?, ?, ?, ?::date, ?, ?::text || i, jsonb_build_object('merchant_order_no', ?::text || i, 'channel_amount_minor', 100 * i,
		       'channel_currency', ?::text, 'channel_status', 'success')
		FROM generate_series(1, ?) i ORDER BY i RETURNING id`, run, run, channel, billDate, string(kind), "txn:"+prefix, prefix, currency, n).
		Scan(&ids).Error; err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// bulkDaemon is a daemon replica over b's database with the bulk job of b's reconciler; its
// RunJob runs a pass here and now.
func (b *bundle) bulkDaemon() *daemon.Daemon {
	b.t.Helper()
	d, err := daemon.New(daemon.Config{DB: b.db, Name: "bulk-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := d.Register(reconcile.NewBulkJob(b.rec), reconcile.BulkJobSpec); err != nil {
		b.t.Fatal(err)
	}
	return d
}

// TestBulk_IgnoreClosesEachFindingOnceAuditedUpToWhatThePreviewSaw: the preview counts the open
// findings a filter matches, sums their amounts per currency and shows a sample, writing
// nothing; the run started from it acts on those findings only (not one found after the
// preview), in batches, each closed once with the reason and note and audited one row each; a
// finding closed meanwhile is skipped, not closed twice.
func TestBulk_IgnoreClosesEachFindingOnceAuditedUpToWhatThePreviewSaw(t *testing.T) {
	b := setup(t, func(c *reconcile.Config) { c.BulkApprovalAbove = 100000 })
	ids := b.seedFindings(2500, reconcile.LocalOnly, "wechat", "CNY", "ord-")
	other := b.seedFindings(3, reconcile.ChannelOnly, "wechat", "USD", "usd-")
	by := reconcile.BulkOperator{ID: 7, Name: "olga", IP: "192.0.2.1"}
	req := reconcile.BulkRequest{Filter: reconcile.FindingFilter{Kind: reconcile.LocalOnly, Channel: "wechat"}, Action: reconcile.ActionIgnore,
		ReasonCode: "test_transaction", Note: "load test 测试", By: by}

	p, err := b.rec.PreviewBulk(b.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wantSum := int64(100 * 2500 * 2501 / 2)
	if p.Count != 2500 || p.Amounts["CNY"] != wantSum || len(p.Amounts) != 1 || len(p.Sample) != 10 || p.UpTo != ids[len(ids)-1] ||
		p.ByKind[reconcile.LocalOnly] != 2500 || p.NeedsApproval {
		t.Fatalf("preview %+v", p)
	}
	if n := b.count(`SELECT count(*) FROM finding_bulk_runs`) + b.count(`SELECT count(*) FROM discrepancies WHERE state <> 'open'`); n != 0 {
		t.Fatalf("the preview wrote: %d", n)
	}
	late := b.seedFindings(1, reconcile.LocalOnly, "wechat", "CNY", "late-") // found after the preview
	run, err := b.rec.StartBulk(b.ctx, req, p.UpTo)
	if err != nil {
		t.Fatal(err)
	}
	if run.State != reconcile.BulkRunning || run.Total != 2500 || run.Amounts["CNY"] != wantSum || strings.Join(run.Tenants, ",") != "*" {
		t.Fatalf("started %+v", run)
	}
	pgtest.Exec(t, b.db, `UPDATE discrepancies SET state = 'resolved', reason_code = 'corrected_locally' WHERE id = ?`, ids[0])

	d := b.bulkDaemon()
	jr, err := d.RunJob(b.ctx, reconcile.BulkJobName)
	if err != nil || jr.Status != daemon.RunSucceeded {
		t.Fatalf("bulk pass: %+v %v", jr, err)
	}
	done, err := b.rec.GetBulkRun(b.ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != reconcile.BulkDone || done.Processed != 2500 || done.Results["ignored"] != 2499 || done.Results["skipped"] != 1 {
		t.Fatalf("run after the pass %+v", done)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'ignored' AND reason_code = 'test_transaction'
		AND note = 'load test 测试' AND resolver = 'operator:olga'`); n != 2499 {
		t.Errorf("%d findings ignored with the reason, want 2499", n)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'open'`); n != int64(len(other))+1 {
		t.Errorf("%d open findings left, want the %d USD ones and the late one", n, len(other))
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE id = ? AND state = 'open'`, late[0]); n != 1 {
		t.Errorf("the finding found after the preview was closed")
	}
	perFinding := map[string]int{}
	for _, a := range b.audit.all() {
		perFinding[a.Action]++
		if a.Action == "reconcile.finding.ignore" && (a.Actor != "operator:olga" || a.Detail["bulk_run"] != run.ID) {
			t.Fatalf("audit row %+v", a)
		}
	}
	if perFinding["reconcile.finding.ignore"] != 2499 || perFinding["reconcile.findings.bulk_start"] != 1 ||
		perFinding["reconcile.findings.bulk_done"] != 1 {
		t.Errorf("audit rows %v, want one per finding ignored, a start and a done", perFinding)
	}
	// The groups table followed every change: it agrees with the rows.
	if n := b.count(`SELECT count(*) FROM (SELECT state, kind, channel, bill_date, COALESCE(tenant, '') t, COALESCE(currency, '') c,
			count(*) n, COALESCE(sum(amount_minor), 0) a FROM discrepancies GROUP BY 1, 2, 3, 4, 5, 6) r
		FULL JOIN (SELECT * FROM discrepancy_groups WHERE n <> 0) g
		ON (g.state, g.kind, g.channel, g.bill_date, g.tenant, g.currency) = (r.state, r.kind, r.channel, r.bill_date, r.t, r.c)
		WHERE g.n IS DISTINCT FROM r.n OR g.amount_minor IS DISTINCT FROM r.a`); n != 0 {
		t.Errorf("%d groups disagree with the findings", n)
	}
	// A second pass finds nothing to do.
	if jr, err := d.RunJob(b.ctx, reconcile.BulkJobName); err != nil || jr.Stats["runs"] != 0 {
		t.Errorf("second pass: %+v %v", jr, err)
	}
}

// TestBulk_FourEyesAboveTheConfiguredCount: a run of more findings than BulkApprovalAbove waits;
// the operator who started it cannot approve it, a second one can, and only then does it run. A
// reason that is not of the vocabulary, or "other" without a note, starts nothing.
func TestBulk_FourEyesAboveTheConfiguredCount(t *testing.T) {
	b := setup(t, func(c *reconcile.Config) { c.BulkApprovalAbove = 5 })
	b.seedFindings(6, reconcile.ChannelOnly, "wechat", "CNY", "o-")
	olga := reconcile.BulkOperator{ID: 1, Name: "olga"}
	req := reconcile.BulkRequest{Filter: reconcile.FindingFilter{Channel: "wechat"}, Action: reconcile.ActionResolve,
		ReasonCode: "refunded_at_channel", By: olga}
	for _, bad := range []struct{ code, note, field string }{{"退款", "客户要求", "reason_code"}, {"other", "", "note"}, {"", "x", "reason_code"}} {
		r := req
		r.ReasonCode, r.Note = bad.code, bad.note
		_, err := b.rec.StartBulk(b.ctx, r, 0)
		var fe *errs.FieldError
		if !errors.As(err, &fe) || fe.Name != bad.field {
			t.Errorf("reason %q note %q: %v; want a field error on %s", bad.code, bad.note, err, bad.field)
		}
	}
	if n := b.count(`SELECT count(*) FROM finding_bulk_runs`); n != 0 {
		t.Fatalf("%d runs stored by refused starts", n)
	}
	run, err := b.rec.StartBulk(b.ctx, req, 0)
	if err != nil || run.State != reconcile.BulkPendingApproval {
		t.Fatalf("start: %+v %v; want it waiting for approval", run, err)
	}
	d := b.bulkDaemon()
	if jr, err := d.RunJob(b.ctx, reconcile.BulkJobName); err != nil || jr.Stats["runs"] != 0 {
		t.Fatalf("a pass before approval: %+v %v", jr, err)
	}
	if _, err := b.rec.DecideBulk(b.ctx, run.ID, olga, true); err == nil || !strings.Contains(err.Error(), "four eyes") {
		t.Fatalf("approval by the one who started it: %v", err)
	}
	approved, err := b.rec.DecideBulk(b.ctx, run.ID, reconcile.BulkOperator{ID: 2, Name: "piotr"}, true)
	if err != nil || approved.State != reconcile.BulkRunning || approved.Approver == nil || *approved.Approver != "piotr" {
		t.Fatalf("approval: %+v %v", approved, err)
	}
	if _, err := b.rec.DecideBulk(b.ctx, run.ID, reconcile.BulkOperator{ID: 3, Name: "quinn"}, false); err == nil {
		t.Fatal("a running run was rejected")
	}
	if jr, err := d.RunJob(b.ctx, reconcile.BulkJobName); err != nil || jr.Stats["findings"] != 6 {
		t.Fatalf("pass after approval: %+v %v", jr, err)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'resolved' AND reason_code = 'refunded_at_channel'`); n != 6 {
		t.Errorf("%d resolved, want 6", n)
	}
}

// TestBulk_RecoverNeverExecutesAndSaysWhyPerFinding: a bulk recover goes finding by finding
// through Recover: a finding with no local key fails with the reason, nothing is executed.
func TestBulk_RecoverNeverExecutesAndSaysWhyPerFinding(t *testing.T) {
	b := setup(t)
	b.seedFindings(3, reconcile.ChannelOnly, "wechat", "CNY", "r-")
	run, err := b.rec.StartBulk(b.ctx, reconcile.BulkRequest{Filter: reconcile.FindingFilter{Channel: "wechat"},
		Action: reconcile.ActionRecover, ReasonCode: "service_crashed", By: reconcile.BulkOperator{ID: 1, Name: "olga"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.bulkDaemon().RunJob(b.ctx, reconcile.BulkJobName); err != nil {
		t.Fatal(err)
	}
	done, err := b.rec.GetBulkRun(b.ctx, run.ID)
	if err != nil || done.State != reconcile.BulkDone || done.Results["failed"] != 3 {
		t.Fatalf("run %+v %v", done, err)
	}
	if n := b.count(`SELECT count(*) FROM finding_bulk_items WHERE run_id = ? AND detail LIKE '%no local key%'`, run.ID); n != 3 {
		t.Errorf("%d items say why (no local key), want 3", n)
	}
	if b.op.executes != 0 {
		t.Errorf("a bulk recover executed %d times", b.op.executes)
	}
}

// TestReopen_OpensAClosedFindingAgainAudited: a resolved finding reopens with a reason of the
// vocabulary; its resolution is cleared and the audit row keeps what it was. An open one, or a
// reason not of the vocabulary, is refused.
func TestReopen_OpensAClosedFindingAgainAudited(t *testing.T) {
	b := setup(t)
	id := b.seedFindings(1, reconcile.AmountMismatch, "wechat", "CNY", "x-")[0]
	if _, err := b.rec.Reopen(b.ctx, id, "olga", "closed_in_error", ""); !errors.Is(err, reconcile.ErrNotClosed) {
		t.Fatalf("reopen of an open finding: %v", err)
	}
	if _, err := b.rec.Resolve(b.ctx, id, "olga", "corrected_at_channel", "the channel fixed it"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.rec.Reopen(b.ctx, id, "olga", "because", ""); !errors.Is(err, reconcile.ErrInvalid) {
		t.Fatalf("reopen with a reason not of the vocabulary: %v", err)
	}
	f, err := b.rec.Reopen(b.ctx, id, "piotr", "channel_reversed", "the channel took its correction back")
	if err != nil {
		t.Fatal(err)
	}
	if f.State != reconcile.FindingOpen || f.ReasonCode != nil || f.Resolver != nil || f.Note != nil || f.ResolvedAt != nil {
		t.Fatalf("reopened %+v", f)
	}
	recs := b.audit.all()
	last := recs[len(recs)-1]
	if last.Action != "reconcile.finding.reopen" || last.Actor != "operator:piotr" || last.Detail["was"] != "resolved" ||
		last.Detail["was_reason_code"] != "corrected_at_channel" || last.Detail["reason_code"] != "channel_reversed" {
		t.Fatalf("audit %+v", last)
	}
}

// TestCountFindings_GroupsFromTheTableAgreeWithTheRows: the groups a simple filter reads from
// discrepancy_groups are the ones grouping the rows gives, per state, kind, channel, bill date,
// owner and currency, after inserts, updates and deletes.
func TestCountFindings_GroupsFromTheTableAgreeWithTheRows(t *testing.T) {
	b := setup(t)
	b.seedFindings(7, reconcile.LocalOnly, "wechat", "CNY", "a-")
	b.seedFindings(4, reconcile.LocalOnly, "alipay", "CNY", "b-")
	ids := b.seedFindings(5, reconcile.ChannelOnly, "wechat", "USD", "c-")
	pgtest.Exec(t, b.db, `UPDATE discrepancies SET state = 'ignored' WHERE id IN (?, ?)`, ids[0], ids[1])
	pgtest.Exec(t, b.db, `DELETE FROM discrepancies WHERE id = ?`, ids[2])
	fromTable, _, err := b.rec.CountFindings(b.ctx, reconcile.FindingFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// A filter the table cannot answer (an order number prefix that matches all) groups the rows.
	fromRows, _, err := b.rec.CountFindings(b.ctx, reconcile.FindingFilter{UpTo: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(fromTable) != fmt.Sprint(fromRows) || len(fromTable) != 4 {
		t.Fatalf("groups\n from the table %+v\n from the rows  %+v", fromTable, fromRows)
	}
	byState, err := b.rec.CountFindingsByState(b.ctx, reconcile.FindingFilter{Channel: "wechat"})
	if err != nil || byState[reconcile.FindingOpen] != 9 || byState[reconcile.FindingIgnored] != 2 {
		t.Fatalf("by state %v %v", byState, err)
	}
	// A truncated table leaves no group behind (TRUNCATE fires no INSERT/UPDATE/DELETE trigger).
	defer func() {
		pgtest.Exec(t, b.db, `TRUNCATE discrepancies CASCADE`)
		if n := b.count(`SELECT count(*) FROM discrepancy_groups`); n != 0 {
			t.Errorf("%d groups left after a TRUNCATE", n)
		}
	}()
	// Merchant order number, exact and by prefix; an amount range in one currency.
	list := func(f reconcile.FindingFilter) int {
		t.Helper()
		fs, err := b.rec.ListFindings(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return len(fs)
	}
	lo, hi := int64(200), int64(500)
	if n := list(reconcile.FindingFilter{OrderNo: "a-3"}); n != 1 {
		t.Errorf("order a-3: %d", n)
	}
	if n := list(reconcile.FindingFilter{OrderNo: "b-*"}); n != 4 {
		t.Errorf("orders b-*: %d", n)
	}
	if n := list(reconcile.FindingFilter{Currency: "cny", AmountMin: &lo, AmountMax: &hi}); n != 4+3 {
		t.Errorf("CNY 2.00-5.00: %d, want 7", n)
	}
	if _, err := b.rec.ListFindings(b.ctx, reconcile.FindingFilter{AmountMin: &lo}); !errors.Is(err, reconcile.ErrInvalid) {
		t.Errorf("an amount range without a currency: %v", err)
	}
}

// TestGroupFindings_TheNewestGroupsOfAStateWithTheirAmountsFromAWindowOrTheRows: the page's
// groups are the newest kind × channel × bill date groups of one state, each with its amount per
// currency, at most limit of them (more says so), read through a window of bill dates that
// widens until it holds them — the same answer as grouping the rows.
func TestGroupFindings_TheNewestGroupsOfAStateWithTheirAmountsFromAWindowOrTheRows(t *testing.T) {
	b := setup(t)
	run, err := b.rec.StartRun(b.ctx, nil, "wechat", billDate, "test")
	if err != nil {
		t.Fatal(err)
	}
	// Groups on 60 bill dates (one every 3 days back from 2024-03-01), two currencies on the
	// newest; one group closed.
	pgtest.Exec(t, b.db, `INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail)
		SELECT ?, ?, 'wechat', date '2024-03-01' - 3 * (i / 2), 'LOCAL_ONLY', 'k:' || i,
		       jsonb_build_object('local_amount_minor', 100, 'local_currency', CASE WHEN i = 1 THEN 'USD' ELSE 'CNY' END)
		FROM generate_series(0, 119) i`, run, run)
	pgtest.Exec(t, b.db, `UPDATE discrepancies SET state = 'ignored' WHERE bill_date = date '2024-03-01' - 6`)
	for _, tc := range []struct {
		f     reconcile.FindingFilter
		limit int
	}{{reconcile.FindingFilter{State: reconcile.FindingOpen}, 5}, {reconcile.FindingFilter{State: reconcile.FindingOpen}, 40},
		{reconcile.FindingFilter{State: reconcile.FindingOpen, UpTo: 1 << 40}, 5}} {
		got, more, err := b.rec.GroupFindings(b.ctx, tc.f, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		dates := map[string]bool{}
		for _, g := range got {
			dates[g.BillDate] = true
			if g.State != reconcile.FindingOpen || g.BillDate == "2024-02-24" {
				t.Errorf("limit %d: group %+v is not open", tc.limit, g)
			}
		}
		if len(dates) != tc.limit || !more || !dates["2024-03-01"] || dates["2024-02-24"] {
			t.Errorf("limit %d (simple %v): %d dates %v, more %v", tc.limit, tc.f.Simple(), len(dates), dates, more)
		}
		if got[0].BillDate != "2024-03-01" || got[0].Currency != "CNY" || got[0].N != 1 || got[0].AmountMinor != 100 ||
			got[1].Currency != "USD" || got[1].BillDate != "2024-03-01" {
			t.Errorf("limit %d: the newest group %+v %+v", tc.limit, got[0], got[1])
		}
	}
	if got, more, err := b.rec.GroupFindings(b.ctx, reconcile.FindingFilter{State: reconcile.FindingOpen}, 100); err != nil || more || len(got) != 60 {
		t.Errorf("every group: %d rows, more %v, %v; want 59 dates (60 rows: two currencies on one)", len(got), more, err)
	}
}
