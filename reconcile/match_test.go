package reconcile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// world is the statement of TestMatch_EveryKindOfFindingIsFoundExactlyOnce and the keys
// behind it.
type world struct {
	keys  map[string]localKey
	lines []wechatLine
	want  []string // "KIND subject"
}

func buildWorld(b *bundle) *world {
	w := &world{keys: map[string]localKey{}}
	at := func(h int) time.Time { return billDay.Add(time.Duration(h) * time.Hour) }
	k := func(name string, amount int64, cur string, st claim.State) localKey {
		w.keys[name] = b.key(name, amount, cur, st)
		return w.keys[name]
	}
	line := func(l wechatLine) { w.lines = append(w.lines, l) }
	subject := func(name string) string { return "key:" + itoa(w.keys[name].ID) }

	ok := k("ok", 10000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(9), Txn: "4200000001", Order: ok.DownstreamKey, Status: "SUCCESS", Amount: 10000})
	// A partial refund of it shares its txn id: not a duplicate.
	line(wechatLine{At: at(15), Txn: "4200000001", Order: ok.DownstreamKey, Status: "REFUND", Amount: 2500})

	k("local-only", 20000, "CNY", claim.StateCompleted)
	w.want = append(w.want, "LOCAL_ONLY "+subject("local-only"))

	// Completed two minutes before midnight: the channel may book it tomorrow (grace 10 min).
	late := k("late", 20500, "CNY", claim.StateCompleted)
	b.completedAt(late, billDay.AddDate(0, 0, 1).Add(-2*time.Minute))

	line(wechatLine{At: at(10), Txn: "4200000004", Order: "ffffffffffffffffffffffffffffffff", Status: "SUCCESS", Amount: 999})
	w.want = append(w.want, "CHANNEL_ONLY txn:4200000004")

	lost := k("lost-completion", 30000, "CNY", claim.StateFailedRetryable)
	line(wechatLine{At: at(11), Txn: "4200000005", Order: lost.DownstreamKey, Status: "SUCCESS", Amount: 30000})
	w.want = append(w.want, "CHANNEL_ONLY "+subject("lost-completion"))

	declined := k("declined-locally", 40000, "CNY", claim.StateFailedFinal)
	line(wechatLine{At: at(12), Txn: "4200000006", Order: declined.DownstreamKey, Status: "SUCCESS", Amount: 40000})
	w.want = append(w.want, "STATUS_MISMATCH "+subject("declined-locally"))

	closed := k("closed-at-channel", 50000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(13), Txn: "4200000007", Order: closed.DownstreamKey, Status: "CLOSED", Amount: 50000})
	w.want = append(w.want, "STATUS_MISMATCH "+subject("closed-at-channel"))

	amount := k("amount", 30000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(14), Txn: "4200000008", Order: amount.DownstreamKey, Status: "SUCCESS", Amount: 31000})
	w.want = append(w.want, "AMOUNT_MISMATCH "+subject("amount"))

	currency := k("currency", 40000, "USD", claim.StateCompleted)
	line(wechatLine{At: at(15), Txn: "4200000009", Order: currency.DownstreamKey, Status: "SUCCESS", Amount: 40000})
	w.want = append(w.want, "CURRENCY_MISMATCH "+subject("currency"))

	double := k("double-charge", 50000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(16), Txn: "4200000010", Order: double.DownstreamKey, Status: "SUCCESS", Amount: 50000})
	line(wechatLine{At: at(17), Txn: "4200000011", Order: double.DownstreamKey, Status: "SUCCESS", Amount: 50000})
	w.want = append(w.want, "DUPLICATE_AT_CHANNEL "+subject("double-charge"))

	listed := k("listed-twice", 60000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(18), Txn: "4200000012", Order: listed.DownstreamKey, Status: "SUCCESS", Amount: 60000})
	line(wechatLine{At: at(18), Txn: "4200000012", Order: listed.DownstreamKey, Status: "SUCCESS", Amount: 60000})
	w.want = append(w.want, "DUPLICATE_IN_FILE txn:4200000012")

	// The channel lost our order number but kept our resource id as its txn id: matched by it.
	byTxn := k("by-txn", 70000, "CNY", claim.StateCompleted)
	line(wechatLine{At: at(19), Txn: byTxn.ResourceID, Order: "", Status: "SUCCESS", Amount: 70000})

	// A key of another operation is not this channel's business.
	other := b.key("other-op", 1, "CNY", claim.StateProcessing)
	_ = other
	sort.Strings(w.want)
	return w
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func TestMatch_EveryKindOfFindingIsFoundExactlyOnce(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	run, err := b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != reconcile.RunSucceeded || run.StatementID == nil || run.AlreadyImported {
		t.Fatalf("run %+v", run)
	}
	got, names := b.findings(run.ID)
	sort.Strings(names)
	if !slices.Equal(names, w.want) {
		t.Fatalf("findings\n got %q\nwant %q", names, w.want)
	}
	// Counts per kind on the run agree with the findings.
	total := int64(0)
	for _, n := range run.Counts {
		total += n
	}
	if total != int64(len(w.want)) || run.Counts["CHANNEL_ONLY"] != 2 || run.Counts["STATUS_MISMATCH"] != 2 {
		t.Errorf("run counts %v", run.Counts)
	}
	// Progress: 13 lines parsed and loaded; of the 12 order lines (the refund is not one), all
	// but the unknown order matched.
	if run.RowsParsed != 13 || run.RowsLoaded != 13 || run.RowsMatched != 11 {
		t.Errorf("progress parsed %d loaded %d matched %d", run.RowsParsed, run.RowsLoaded, run.RowsMatched)
	}

	var amount struct {
		Local      int64 `json:"local_amount_minor"`
		Channel    int64 `json:"channel_amount_minor"`
		Difference int64 `json:"difference_minor"`
	}
	f := got["AMOUNT_MISMATCH key:"+itoa(w.keys["amount"].ID)]
	if err := json.Unmarshal(f.Detail, &amount); err != nil || amount.Local != 30000 || amount.Channel != 31000 || amount.Difference != 1000 {
		t.Errorf("amount detail %s", f.Detail)
	}
	var status struct{ Direction string }
	f = got["STATUS_MISMATCH key:"+itoa(w.keys["closed-at-channel"].ID)]
	if json.Unmarshal(f.Detail, &status); status.Direction != "channel_failed_local_completed" {
		t.Errorf("status detail %s", f.Detail)
	}
	f = got["STATUS_MISMATCH key:"+itoa(w.keys["declined-locally"].ID)]
	if json.Unmarshal(f.Detail, &status); status.Direction != "channel_success_local_failed" {
		t.Errorf("status detail %s", f.Detail)
	}
	var dup struct {
		Successes int `json:"successes"`
		Charges   []struct {
			Txn string `json:"channel_txn_id"`
		} `json:"charges"`
	}
	f = got["DUPLICATE_AT_CHANNEL key:"+itoa(w.keys["double-charge"].ID)]
	if json.Unmarshal(f.Detail, &dup); dup.Successes != 2 || len(dup.Charges) != 2 || dup.Charges[1].Txn != "4200000011" {
		t.Errorf("duplicate detail %s", f.Detail)
	}
	f = got["DUPLICATE_IN_FILE txn:4200000012"]
	if f.KeyID == nil || *f.KeyID != w.keys["listed-twice"].ID || f.StatementLineID == nil {
		t.Errorf("duplicate in file %+v", f)
	}
	for _, f := range got {
		if f.State != reconcile.FindingOpen || f.RunID != run.ID || f.FirstRunID != run.ID {
			t.Errorf("finding %s %s: state %s run %d first %d", f.Kind, f.Subject, f.State, f.RunID, f.FirstRunID)
		}
	}
}

func TestMatch_ReRunOfTheSameStatementUpdatesTheSameFindings(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	file := wechatBill(w.lines, 0)
	first, err := b.reconcileFile(job, file)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := b.findings(first.ID)
	second, err := b.reconcileFile(job, file)
	if err != nil {
		t.Fatal(err)
	}
	if !second.AlreadyImported || *second.StatementID != *first.StatementID {
		t.Fatalf("second run %+v: the same file must not be imported again", second)
	}
	if n := b.count(`SELECT count(*) FROM statements`); n != 1 {
		t.Errorf("%d statements", n)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines`); n != int64(len(w.lines)) {
		t.Errorf("%d statement lines; want %d", n, len(w.lines))
	}
	after, _ := b.findings(second.ID)
	if len(after) != len(before) || b.count(`SELECT count(*) FROM discrepancies`) != int64(len(before)) {
		t.Fatalf("%d findings before, %d after, %d rows", len(before), len(after), b.count(`SELECT count(*) FROM discrepancies`))
	}
	for name, f := range before {
		g, ok := after[name]
		if !ok || g.ID != f.ID || g.FirstRunID != first.ID || g.State != reconcile.FindingOpen {
			t.Errorf("%s: before %d, after %+v", name, f.ID, g)
		}
	}
	if left, _ := b.findings(first.ID); len(left) != 0 {
		t.Errorf("the first run still lists %d findings; they moved to the run that last found them", len(left))
	}
}

func TestImport_ChangedFileIsANewVersionWithADiff(t *testing.T) {
	b := setup(t)
	at := billDay.Add(9 * time.Hour)
	v1 := []wechatLine{
		{At: at, Txn: "T1", Order: "O1", Status: "SUCCESS", Amount: 100},
		{At: at, Txn: "T2", Order: "O2", Status: "SUCCESS", Amount: 200},
		{At: at, Txn: "T3", Order: "O3", Status: "SUCCESS", Amount: 300},
	}
	v2 := []wechatLine{
		{At: at, Txn: "T1", Order: "O1", Status: "SUCCESS", Amount: 100},
		{At: at, Txn: "T2", Order: "O2", Status: "SUCCESS", Amount: 250}, // changed
		{At: at, Txn: "T4", Order: "O4", Status: "SUCCESS", Amount: 400}, // added; T3 removed
	}
	imp := func(file []byte) *reconcile.ImportResult {
		res, err := b.rec.Import(b.ctx, reconcile.ImportRequest{Channel: "wechat", Format: "wechat", Location: shanghai,
			Importer: "operator:alice"}, bytesReader(file), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	r1 := imp(wechatBill(v1, 0))
	if r1.Version != 1 || r1.BillDate != billDate || r1.Diff != nil || r1.Lines != 3 {
		t.Fatalf("first import %+v", r1)
	}
	again := imp(wechatBill(v1, 0))
	if !again.AlreadyImported || again.StatementID != r1.StatementID || again.Version != 1 {
		t.Fatalf("re-import %+v: must be a no-op", again)
	}
	r2 := imp(wechatBill(v2, 0))
	if r2.Version != 2 || r2.AlreadyImported || r2.Diff == nil {
		t.Fatalf("second version %+v", r2)
	}
	d := r2.Diff
	if d.PreviousStatementID != r1.StatementID || d.PreviousVersion != 1 || d.Added != 1 || d.Removed != 1 || d.Changed != 1 ||
		!slices.Equal(d.AddedTxnIDs, []string{"T4"}) || !slices.Equal(d.RemovedTxnIDs, []string{"T3"}) || !slices.Equal(d.ChangedTxnIDs, []string{"T2"}) {
		t.Errorf("diff %+v", d)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines`); n != 6 {
		t.Errorf("%d lines; want 3 per version", n)
	}
}

func TestImport_ControlTotalMismatchIsAFindingAndNothingIsImported(t *testing.T) {
	b := setup(t)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 0)
	at := billDay.Add(9 * time.Hour)
	file := wechatBill([]wechatLine{{At: at, Txn: "T1", Order: "O1", Status: "SUCCESS", Amount: 100},
		{At: at, Txn: "T2", Order: "O2", Status: "SUCCESS", Amount: 200}}, 1)
	run, err := b.reconcileFile(job, file)
	if !errors.Is(err, reconcile.ErrControlTotal) {
		t.Fatalf("err %v; want a control total error", err)
	}
	if run == nil || run.Status != reconcile.RunRejected || run.Counts["CONTROL_TOTAL_MISMATCH"] != 1 || run.Error == nil {
		t.Fatalf("run %+v", run)
	}
	if n := b.count(`SELECT count(*) FROM statements`) + b.count(`SELECT count(*) FROM statement_lines`); n != 0 {
		t.Errorf("%d statement rows written for a rejected statement", n)
	}
	got, names := b.findings(run.ID)
	if len(names) != 1 || got[names[0]].Kind != reconcile.ControlTotalMismatch || got[names[0]].BillDate != billDate {
		t.Fatalf("findings %q", names)
	}
	var detail struct {
		Mismatches string `json:"mismatches"`
		SHA        string `json:"sha256"`
	}
	json.Unmarshal(got[names[0]].Detail, &detail)
	if detail.Mismatches != "应结订单总金额 stated 3.01, computed 3.00" || len(detail.SHA) != 64 {
		t.Errorf("detail %s", got[names[0]].Detail)
	}
	// The same rejected file again: the same finding, not a copy.
	run2, _ := b.reconcileFile(job, file)
	if n := b.count(`SELECT count(*) FROM discrepancies`); n != 1 || run2.Status != reconcile.RunRejected {
		t.Errorf("%d findings after the second rejection", n)
	}
}

func TestImport_ABadLineImportsNothingAndNamesTheLine(t *testing.T) {
	b := setup(t)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 0)
	file, err := os.ReadFile("testdata/wechat/bad_amount.csv")
	if err != nil {
		t.Fatal(err)
	}
	run, err := b.reconcileFile(job, file)
	var le *reconcile.LineError
	if !errors.As(err, &le) || le.Line < 2 {
		t.Fatalf("err %v; want a line error", err)
	}
	if run.Status != reconcile.RunFailed || run.Error == nil || *run.Error != le.Error() {
		t.Errorf("run %+v", run)
	}
	if n := b.count(`SELECT count(*) FROM statements`) + b.count(`SELECT count(*) FROM statement_lines`) +
		b.count(`SELECT count(*) FROM discrepancies`); n != 0 {
		t.Errorf("%d rows written for a statement with a bad line", n)
	}
}

func TestImport_OverTheSizeLimitIsRefused(t *testing.T) {
	b := setup(t, func(c *reconcile.Config) { c.MaxBytes = 1024 })
	lines := make([]wechatLine, 20)
	for i := range lines {
		lines[i] = wechatLine{At: billDay.Add(time.Hour), Txn: "T" + itoa(int64(i)), Order: "O", Status: "SUCCESS", Amount: 1}
	}
	_, err := b.rec.Import(b.ctx, reconcile.ImportRequest{Channel: "wechat", Format: "wechat", Importer: "operator:alice"},
		bytesReader(wechatBill(lines, 0)), nil)
	if !errors.Is(err, reconcile.ErrTooLarge) {
		t.Fatalf("err %v; want ErrTooLarge", err)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines`); n != 0 {
		t.Errorf("%d lines imported", n)
	}
}

func TestMatch_KeyCompletedJustBeforeTheDayIsClearedByThePreviousDaysStatement(t *testing.T) {
	b := setup(t)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	early := b.key("early", 100, "CNY", claim.StateCompleted)
	b.completedAt(early, billDay.Add(-3*time.Minute))
	missing := b.key("missing", 100, "CNY", claim.StateCompleted)
	b.completedAt(missing, billDay.Add(-4*time.Minute))

	// The day before lists "early" (booked before midnight), not "missing".
	prev := wechatBill([]wechatLine{{At: billDay.Add(-3 * time.Minute), Txn: "P1", Order: early.DownstreamKey, Status: "SUCCESS", Amount: 100}}, 0)
	if _, err := b.rec.Import(b.ctx, reconcile.ImportRequest{Channel: "wechat", Format: "wechat", BillDate: "2024-02-29",
		Importer: "operator:alice"}, bytesReader(prev), nil); err != nil {
		t.Fatal(err)
	}
	other := wechatBill([]wechatLine{{At: billDay.Add(time.Hour), Txn: "X", Order: "X", Status: "CLOSED", Amount: 1}}, 0)
	run, err := b.reconcileFile(job, other)
	if err != nil {
		t.Fatal(err)
	}
	_, names := b.findings(run.ID)
	if want := []string{"LOCAL_ONLY key:" + itoa(missing.ID)}; !slices.Equal(names, want) {
		t.Errorf("findings %q; want %q", names, want)
	}
}
