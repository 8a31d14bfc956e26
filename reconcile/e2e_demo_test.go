package reconcile_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/clock"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
)

// e2e is the demo world of TestE2E_DemoWorldFaultsProduceEachKindOfFindingExactlyOnce: paysim,
// the payments service, and a reconciler on the same database.
type e2e struct {
	t     *testing.T
	ctx   context.Context
	db    *gorm.DB
	store *claim.Store
	w     *demo.World
	rec   *reconcile.Reconciler
	audit *recordingAuditor
}

// pay posts one payment through the demo service (bearer key of acme) and returns the status.
func (e *e2e) pay(key string, amount int64, currency, payee string, headers ...string) int {
	e.t.Helper()
	body := fmt.Sprintf(`{"amount_minor": %d, "currency": %q, "merchant_order_no": "ord-%s", "payee": %q, "description": "e2e"}`,
		amount, currency, key, payee)
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, e.w.APIURL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.w.APIKey("acme"))
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("pay %s: %v", key, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// dk is the downstream key (= paysim's merchant order number) of an acme payment key.
func dk(key string) string { return claim.DownstreamKey("acme", demo.OperationCharge, key) }

// keyID is the local key's id.
func (e *e2e) keyID(key string) int64 {
	e.t.Helper()
	var id int64
	if err := e.db.Raw(`SELECT id FROM idempotency_keys WHERE downstream_key = ?`, dk(key)).Scan(&id).Error; err != nil || id == 0 {
		e.t.Fatalf("key %s: id %d %v", key, id, err)
	}
	return id
}

// charges lists what paysim holds for a payment key.
func (e *e2e) charges(key string) []paysim.Charge {
	e.t.Helper()
	l, err := e.w.Client.Charges(e.ctx, dk(key))
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Charges
}

func (e *e2e) reconcile(date string, file []byte) (*reconcile.Run, error) {
	e.t.Helper()
	return e.rec.Reconcile(e.ctx, reconcile.RunRequest{
		Import: reconcile.ImportRequest{Channel: "wechat", Format: "wechat", BillDate: date, Location: paysim.Shanghai,
			Importer: "operator:e2e"},
		// Grace 0: every key of the test completed well inside the day (see waitPastMidnight).
		Match: &reconcile.MatchSettings{Operations: []string{demo.OperationCharge}, Location: paysim.Shanghai},
	}, bytes.NewReader(file), nil)
}

// waitPastMidnight keeps the scenario inside one Shanghai day: the keys' completion times (the
// database's clock) and paysim's charge times (its own clock) must fall on the bill date.
func waitPastMidnight(t *testing.T) { clock.AvoidMidnight(t, paysim.Shanghai, 30*time.Second) }

// TestE2E_DemoWorldFaultsProduceEachKindOfFindingExactlyOnce drives the demo payments service
// and paysim into every discrepancy reconciliation knows, reconciles paysim's WeChat bill of
// the day, and checks that each kind of finding is found exactly once and nothing else is; a
// re-run of the same statement finds the same findings (same ids); the CHANNEL_ONLY one is
// recovered through the claim logic with exactly one charge at the channel.
func TestE2E_DemoWorldFaultsProduceEachKindOfFindingExactlyOnce(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	t.Parallel()
	waitPastMidnight(t)
	ctx := context.Background()
	db := pgtest.New(t)
	// A short lease, so the crashed request's key can be recovered within the test.
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("e2e-test-secret-0123456"), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: db, Store: store,
		Paysim: paysim.Config{Seed: 61, DeclinePayees: []string{"mallory"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	// Every payment of this scenario must meet paysim's one WeChat Pay bill, a USD one too: the
	// service charges through no channel in particular, and its keys record no account (they
	// are matched by tenant, as before accounts were recorded). TestE2E_DemoRoutesEachCharge…
	// covers the routed world.
	w.Charge.Routes = nil
	audit := &recordingAuditor{}
	rec, err := reconcile.New(db, reconcile.Config{Store: store, Operations: demo.Ops{W: w}, Auditor: audit,
		ProgressInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{t: t, ctx: ctx, db: db, store: store, w: w, rec: rec, audit: audit}
	date := time.Now().In(paysim.Shanghai).Format(time.DateOnly)

	expect := func(key string, want int, got int) {
		t.Helper()
		if got != want {
			t.Fatalf("payment %s: status %d, want %d", key, got, want)
		}
	}
	// Matched, no finding: plain payments, a dropped response recovered by the client's retry,
	// and a 503 before anything was charged (the key stays failed_retryable, the channel has
	// nothing: both sides agree there is no payment).
	for i, key := range []string{"ok-1", "ok-2", "ok-3"} {
		expect(key, 201, e.pay(key, int64(1000+i), "CNY", "alice"))
	}
	expect("drop-1", 503, e.pay("drop-1", 2000, "CNY", "bob", paysim.HeaderFault, "drop-response"))
	expect("drop-1", 201, e.pay("drop-1", 2000, "CNY", "bob"))
	if st := e.pay("error-1", 2100, "CNY", "bob", paysim.HeaderFault, "error"); st < 500 {
		t.Fatalf("error fault: status %d", st)
	}

	// CHANNEL_ONLY: the service crashed between the channel call and its commit.
	expect("crash-1", 500, e.pay("crash-1", 3000, "CNY", "carol", "X-Demo-Crash", "after-charge"))

	// STATUS_MISMATCH (channel succeeded, key failed_final): paysim declined, then reports the
	// charge succeeded after all.
	expect("declined-1", 402, e.pay("declined-1", 4000, "CNY", "mallory"))
	succeeded, failed := paysim.StatusSucceeded, paysim.StatusFailed
	if _, err := w.Client.AlterCharge(ctx, e.charges("declined-1")[0].ID, paysim.ChargeChange{Status: &succeeded}); err != nil {
		t.Fatal(err)
	}

	// LOCAL_ONLY: completed locally, then the channel reports the charge failed. A failed charge
	// moved no money and is on no statement, so the key has no line.
	expect("reversed-1", 201, e.pay("reversed-1", 5000, "CNY", "dave"))
	if _, err := w.Client.AlterCharge(ctx, e.charges("reversed-1")[0].ID, paysim.ChargeChange{Status: &failed}); err != nil {
		t.Fatal(err)
	}

	// AMOUNT_MISMATCH: the channel reports 1.00 CNY more than was asked.
	expect("amount-1", 201, e.pay("amount-1", 6000, "CNY", "erin"))
	more := int64(6100)
	if _, err := w.Client.AlterCharge(ctx, e.charges("amount-1")[0].ID, paysim.ChargeChange{AmountMinor: &more}); err != nil {
		t.Fatal(err)
	}

	// CURRENCY_MISMATCH: asked in USD, settled by the channel in CNY (so it is on the CNY bill).
	expect("currency-1", 201, e.pay("currency-1", 7000, "USD", "frank"))
	cny := "CNY"
	if _, err := w.Client.AlterCharge(ctx, e.charges("currency-1")[0].ID, paysim.ChargeChange{Currency: &cny}); err != nil {
		t.Fatal(err)
	}

	// DUPLICATE_AT_CHANNEL: a second successful charge for the same merchant order number.
	expect("double-1", 201, e.pay("double-1", 8000, "CNY", "grace"))
	if _, err := w.Client.InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 8000, Currency: "CNY",
		MerchantOrderNo: dk("double-1"), Payee: "grace"}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.charges("double-1")); n != 2 {
		t.Fatalf("double-1: %d charges at paysim", n)
	}
	if d := time.Now().In(paysim.Shanghai).Format(time.DateOnly); d != date {
		t.Fatalf("the Shanghai day turned during the scenario (%s → %s)", date, d)
	}

	stmt, err := w.Client.Statement(ctx, date, paysim.FormatWechat)
	if err != nil {
		t.Fatal(err)
	}
	// DUPLICATE_IN_FILE: the export lists ok-3's charge twice, with totals that include it.
	dupTxn := e.charges("ok-3")[0].ID
	file := wechatDuplicateRow(t, stmt, dupTxn)
	// CONTROL_TOTAL_MISMATCH: another download of the bill whose summary says 0.01 CNY more.
	tampered := wechatSkewSummary(t, stmt, 1)
	tamperedSum := sha256.Sum256(tampered)

	run, err := e.reconcile(date, file)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != reconcile.RunSucceeded || run.AlreadyImported || run.StatementVer == nil || *run.StatementVer != 1 {
		t.Fatalf("run %+v", run)
	}
	// Every finding that names a key but the crashed one (processing: it has not said yet): the
	// keys say no account.
	if run.KeysWithoutAccount != 6 {
		t.Errorf("run: %d findings about keys without an account, want 6", run.KeysWithoutAccount)
	}
	rejected, err := e.reconcile(date, tampered)
	if !errors.Is(err, reconcile.ErrControlTotal) || rejected == nil || rejected.Status != reconcile.RunRejected {
		t.Fatalf("tampered bill: run %+v err %v; want it rejected for its control totals", rejected, err)
	}

	want := map[string]reconcile.Kind{
		"key:" + itoa(e.keyID("reversed-1")):         reconcile.LocalOnly,
		"key:" + itoa(e.keyID("crash-1")):            reconcile.ChannelOnly,
		"key:" + itoa(e.keyID("declined-1")):         reconcile.StatusMismatch,
		"key:" + itoa(e.keyID("amount-1")):           reconcile.AmountMismatch,
		"key:" + itoa(e.keyID("currency-1")):         reconcile.CurrencyMismatch,
		"key:" + itoa(e.keyID("double-1")):           reconcile.DuplicateAtChannel,
		"txn:" + dupTxn:                              reconcile.DuplicateInFile,
		"file:" + hex.EncodeToString(tamperedSum[:]): reconcile.ControlTotalMismatch,
	}
	var wantNames []string
	for subject, kind := range want {
		wantNames = append(wantNames, string(kind)+" "+subject)
	}
	sort.Strings(wantNames)

	all, err := rec.ListFindings(ctx, reconcile.FindingFilter{Channel: "wechat", BillDate: date})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]reconcile.Finding{}
	var names []string
	for _, f := range all {
		n := string(f.Kind) + " " + f.Subject
		byName[n] = f
		names = append(names, n)
		t.Logf("finding %-22s %-28s %s", f.Kind, f.Subject, f.Detail)
	}
	sort.Strings(names)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("findings\n got %q\nwant %q", names, wantNames)
	}
	kinds := map[reconcile.Kind]int{}
	for _, f := range all {
		kinds[f.Kind]++
		if f.State != reconcile.FindingOpen {
			t.Errorf("%s %s: state %s", f.Kind, f.Subject, f.State)
		}
	}
	for _, k := range demoWorldKinds() {
		if kinds[k] != 1 {
			t.Errorf("%s found %d times; want exactly once", k, kinds[k])
		}
	}
	wantCounts := map[string]int64{}
	for _, k := range demoWorldKinds() {
		if k != reconcile.ControlTotalMismatch {
			wantCounts[string(k)] = 1
		}
	}
	if !mapsEqual(run.Counts, wantCounts) || !mapsEqual(rejected.Counts, map[string]int64{"CONTROL_TOTAL_MISMATCH": 1}) {
		t.Errorf("run counts %v, rejected run counts %v", run.Counts, rejected.Counts)
	}
	detail := func(name string, v any) {
		t.Helper()
		if err := json.Unmarshal(byName[name].Detail, v); err != nil {
			t.Fatalf("%s detail: %v", name, err)
		}
	}
	var status struct{ Direction string }
	if detail("STATUS_MISMATCH key:"+itoa(e.keyID("declined-1")), &status); status.Direction != "channel_success_local_failed" {
		t.Errorf("status mismatch direction %q", status.Direction)
	}
	var amount struct {
		Difference int64 `json:"difference_minor"`
	}
	if detail("AMOUNT_MISMATCH key:"+itoa(e.keyID("amount-1")), &amount); amount.Difference != 100 {
		t.Errorf("amount difference %d; want 100", amount.Difference)
	}
	var currency struct {
		Local   string `json:"local_currency"`
		Channel string `json:"channel_currency"`
	}
	if detail("CURRENCY_MISMATCH key:"+itoa(e.keyID("currency-1")), &currency); currency.Local != "USD" || currency.Channel != "CNY" {
		t.Errorf("currency local %q channel %q", currency.Local, currency.Channel)
	}
	var dup struct {
		Successes int `json:"successes"`
	}
	if detail("DUPLICATE_AT_CHANNEL key:"+itoa(e.keyID("double-1")), &dup); dup.Successes != 2 {
		t.Errorf("double charge successes %d", dup.Successes)
	}
	var channelOnly struct {
		Reason        string `json:"reason"`
		LocalState    string `json:"local_state"`
		ChannelStatus string `json:"channel_status"`
	}
	crashFinding := byName["CHANNEL_ONLY key:"+itoa(e.keyID("crash-1"))]
	if detail("CHANNEL_ONLY key:"+itoa(e.keyID("crash-1")), &channelOnly); channelOnly.LocalState != string(claim.StateProcessing) ||
		channelOnly.ChannelStatus != "success" {
		t.Errorf("channel only detail %+v", channelOnly)
	}

	// The same statement version again: the same findings, updated — no new ones.
	again, err := e.reconcile(date, file)
	if err != nil {
		t.Fatal(err)
	}
	if !again.AlreadyImported || *again.StatementID != *run.StatementID || !mapsEqual(again.Counts, wantCounts) {
		t.Fatalf("re-run %+v", again)
	}
	after, err := rec.ListFindings(ctx, reconcile.FindingFilter{RunID: again.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(want)-1 {
		t.Errorf("re-run lists %d findings; want %d", len(after), len(want)-1)
	}
	for _, f := range after {
		prev, ok := byName[string(f.Kind)+" "+f.Subject]
		if !ok || prev.ID != f.ID || f.FirstRunID != run.ID || f.State != reconcile.FindingOpen {
			t.Errorf("re-run: %s %s id %d first run %d state %s; before id %d", f.Kind, f.Subject, f.ID, f.FirstRunID, f.State, prev.ID)
		}
	}
	// The rejected download's finding is not one matching produces: the latest version of the
	// day's statement matched again closes it as superseded (matcher.go, closeGoneSQL).
	ctm := byName["CONTROL_TOTAL_MISMATCH file:"+hex.EncodeToString(tamperedSum[:])]
	if f, err := rec.GetFinding(ctx, ctm.ID); err != nil || f.State != reconcile.FindingResolved ||
		f.ReasonCode == nil || *f.ReasonCode != "not_found_again" || f.Resolver == nil || *f.Resolver != "reconcile" {
		t.Errorf("the rejected bill's finding after the re-run: %+v %v", f, err)
	}
	var rows int64
	db.Raw(`SELECT count(*) FROM discrepancies`).Scan(&rows)
	if rows != int64(len(want)) {
		t.Errorf("%d finding rows after the re-run; want %d", rows, len(want))
	}

	// Recover the crashed payment from the channel's document through the claim logic. Its
	// lease (1 s) must lapse first: until then another attempt may still be working on it.
	crashID := e.keyID("crash-1")
	pgtest.SleepUntil(t, db, `SELECT lease_expires_at FROM idempotency_keys WHERE id = ?`, crashID)
	recovery, err := rec.Recover(ctx, crashFinding.ID, "alice", "the channel has the charge; the service crashed")
	if err != nil {
		t.Fatal(err)
	}
	if recovery.Outcome != claim.Recovered || recovery.State != claim.StateCompleted ||
		recovery.Finding.State != reconcile.FindingResolved || *recovery.Finding.ReasonCode != "recovered" {
		t.Fatalf("recovery %+v finding %+v", recovery, recovery.Finding)
	}
	key, err := store.Get(ctx, crashID)
	if err != nil || key.State != claim.StateCompleted {
		t.Fatalf("crashed key after recovery: %+v %v", key, err)
	}
	crashCharges := e.charges("crash-1")
	if len(crashCharges) != 1 || key.ResourceID == nil || *key.ResourceID != demo.PaymentID(dk("crash-1")) {
		t.Fatalf("%d charges at paysim for the recovered payment; resource %v", len(crashCharges), key.ResourceID)
	}
	var payments int64
	db.Raw(`SELECT count(*) FROM payments WHERE id = ? AND channel_txn_id = ?`, demo.PaymentID(dk("crash-1")), crashCharges[0].ID).Scan(&payments)
	if payments != 1 {
		t.Errorf("%d payments rows for the recovered payment", payments)
	}
	if recs := audit.all(); len(recs) != 1 || recs[0].Actor != "operator:alice" || recs[0].Action != "reconcile.finding.recover" ||
		recs[0].Target != "finding:"+itoa(crashFinding.ID) {
		t.Errorf("audit %+v", recs)
	}
	// The client's retry now gets the recovered payment, without a second charge.
	if st := e.pay("crash-1", 3000, "CNY", "carol"); st != 201 || len(e.charges("crash-1")) != 1 {
		t.Errorf("retry after recovery: %d, %d charges", st, len(e.charges("crash-1")))
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// wechatBillRows splits a WeChat ALL bill into its detail header, detail rows, summary header
// and summary row.
func wechatBillRows(t *testing.T, bill []byte) (header []string, details [][]string, sumHeader, sum []string) {
	t.Helper()
	r := csv.NewReader(bytes.NewReader(bill))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 3 || rows[len(rows)-2][0] != "总交易单数" {
		t.Fatalf("not a WeChat ALL bill with a summary: %d rows", len(rows))
	}
	return rows[0], rows[1 : len(rows)-2], rows[len(rows)-2], rows[len(rows)-1]
}

func writeBill(t *testing.T, rows [][]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	if err := cw.WriteAll(rows); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func column(t *testing.T, header []string, name string) int {
	t.Helper()
	i := slices.Index(header, name)
	if i < 0 {
		t.Fatalf("no column %s", name)
	}
	return i
}

// addAmount adds minor units to a backticked CNY amount.
func addAmount(t *testing.T, v string, minor int64) string {
	t.Helper()
	n, err := money.Parse(strings.TrimPrefix(v, "`"), "CNY")
	if err != nil {
		t.Fatal(err)
	}
	return "`" + money.Format(n+minor, "CNY")
}

// wechatDuplicateRow lists the detail row of channel transaction txn twice, and makes the
// summary row count and add it again, so the control totals still agree.
func wechatDuplicateRow(t *testing.T, bill []byte, txn string) []byte {
	t.Helper()
	header, details, sumHeader, sum := wechatBillRows(t, bill)
	txnCol := column(t, header, "微信订单号")
	at := slices.IndexFunc(details, func(r []string) bool { return r[txnCol] == "`"+txn })
	if at < 0 {
		t.Fatalf("no detail row for %s", txn)
	}
	row := details[at]
	details = slices.Insert(details, at+1, slices.Clone(row))
	sum = slices.Clone(sum)
	sum[column(t, sumHeader, "总交易单数")] = fmt.Sprintf("`%d", len(details))
	for total, detailCol := range map[string]string{"应结订单总金额": "应结订单金额", "退款总金额": "退款金额",
		"充值券退款总金额": "充值券退款金额", "手续费总金额": "手续费", "订单总金额": "订单金额", "申请退款总金额": "申请退款金额"} {
		v, err := money.Parse(strings.TrimPrefix(row[column(t, header, detailCol)], "`"), "CNY")
		if err != nil {
			t.Fatal(err)
		}
		i := column(t, sumHeader, total)
		sum[i] = addAmount(t, sum[i], v)
	}
	return writeBill(t, slices.Concat([][]string{header}, details, [][]string{sumHeader, sum}))
}

// wechatSkewSummary adds skew minor units to the bill's stated 应结订单总金额.
func wechatSkewSummary(t *testing.T, bill []byte, skew int64) []byte {
	t.Helper()
	header, details, sumHeader, sum := wechatBillRows(t, bill)
	sum = slices.Clone(sum)
	i := column(t, sumHeader, "应结订单总金额")
	sum[i] = addAmount(t, sum[i], skew)
	return writeBill(t, slices.Concat([][]string{header}, details, [][]string{sumHeader, sum}))
}

// demoWorldKinds are the kinds the demo world's faults make: all but settlement and fees, which
// TestSettlementAndFeeMismatches covers (the demo's channel bills agree with their payouts).
func demoWorldKinds() []reconcile.Kind {
	var out []reconcile.Kind
	for _, k := range reconcile.Kinds {
		if k != reconcile.SettlementMismatch && k != reconcile.FeeMismatch {
			out = append(out, k)
		}
	}
	return out
}
