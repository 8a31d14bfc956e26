package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	shanghai, _ = time.LoadLocation("Asia/Shanghai")
	// billDay is the day the test statements cover, in the channel's zone.
	billDay = time.Date(2024, 3, 1, 0, 0, 0, 0, shanghai)
)

const billDate = "2024-03-01"

// chargeOp is the channel in memory: documents by downstream key. Execute must never run
// during reconciliation (recover looks documents up, it does not charge).
type chargeOp struct {
	t        *testing.T
	mu       sync.Mutex
	docs     map[string]*claim.Document
	executes int
}

func (o *chargeOp) Name() string { return "payment.charge" }
func (o *chargeOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency"}
}
func (o *chargeOp) Execute(context.Context, *claim.Lease) (*claim.Document, error) {
	o.mu.Lock()
	o.executes++
	o.mu.Unlock()
	return nil, claim.RetryableFailure("unexpected", "reconciliation must not execute")
}
func (o *chargeOp) Lookup(_ context.Context, l *claim.Lease) (*claim.Document, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.docs[l.DownstreamKey], nil
}
func (o *chargeOp) Apply(_ context.Context, _ *gorm.DB, _ *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	return &claim.Snapshot{Status: 201, Body: []byte(`{"status":"succeeded"}`), ResourceID: doc.ResourceID}, nil
}

// registry is the Operations the reconciler looks operations up in.
type registry map[string]claim.Operation

func (r registry) Get(name string) (claim.Operation, bool) { op, ok := r[name]; return op, ok }

// auditRecord is one Auditor.Record call.
type auditRecord struct {
	Actor, Action, Target string
	Detail                map[string]any
}

type recordingAuditor struct {
	mu      sync.Mutex
	records []auditRecord
	fail    error
}

func (a *recordingAuditor) Record(_ context.Context, actor, action, target string, detail map[string]any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	a.records = append(a.records, auditRecord{actor, action, target, detail})
	return nil
}

// RecordBatch records entries like Record (a bulk run's), failing the batch when a.fail is set.
func (a *recordingAuditor) RecordBatch(_ context.Context, _ *gorm.DB, entries []reconcile.AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	for _, e := range entries {
		a.records = append(a.records, auditRecord{e.Actor, e.Action, e.Target, e.Detail})
	}
	return nil
}

func (a *recordingAuditor) all() []auditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]auditRecord(nil), a.records...)
}

// bundle is one test's world: a fresh database, the claim store, the reconciler.
type bundle struct {
	t     *testing.T
	ctx   context.Context
	db    *gorm.DB
	store *claim.Store
	op    *chargeOp
	audit *recordingAuditor
	rec   *reconcile.Reconciler
}

func setup(t *testing.T, cfgs ...func(*reconcile.Config)) *bundle {
	t.Helper()
	t.Parallel()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("test-secret-0123456789"), Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	op := &chargeOp{t: t, docs: map[string]*claim.Document{}}
	audit := &recordingAuditor{}
	cfg := reconcile.Config{Store: store, Operations: registry{op.Name(): op}, Auditor: audit,
		RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond, ProgressInterval: time.Millisecond,
		Sources: reconcile.SourcePolicy{FileRoot: os.TempDir()}, Keyring: testKeyring}
	for _, f := range cfgs {
		f(&cfg)
	}
	rec, err := reconcile.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: context.Background(), db: db, store: store, op: op, audit: audit, rec: rec}
}

// testKeyring seals the tests' credentials (the deployment secret of a test).
var testKeyring, _ = reconcile.NewKeyring([]byte("test-deployment-secret-0123"))

// allow adds origins (test servers) to the statement-source allow-list.
func allow(origins ...string) func(*reconcile.Config) {
	return func(c *reconcile.Config) { c.Sources.Allow = append(c.Sources.Allow, origins...) }
}

// localKey is a key made through the claim package.
type localKey struct {
	ID            int64
	DownstreamKey string
	ResourceID    string
}

// key claims name for amount/currency and leaves it in state end: completed (resource id
// ch_NAME), failed_retryable, failed_final, or processing (lease live).
func (b *bundle) key(name string, amount int64, currency string, end claim.State) localKey {
	b.t.Helper()
	intent := fmt.Sprintf(`{"amount_minor": %d, "currency": %q, "payee": "acme"}`, amount, currency)
	out, err := b.store.Claim(b.ctx, claim.Request{Tenant: "t1", Operation: b.op.Name(), Key: name,
		Intent: json.RawMessage(intent), Spec: b.op.Intent(), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		b.t.Fatalf("claim %s: %v %v", name, out, err)
	}
	l := out.Lease
	k := localKey{ID: l.KeyID, DownstreamKey: l.DownstreamKey}
	switch end {
	case claim.StateCompleted:
		k.ResourceID = "ch_" + name
		err = b.store.Complete(b.ctx, nil, l, &claim.Snapshot{Status: 201, ResourceID: k.ResourceID})
	case claim.StateFailedRetryable:
		err = b.store.Fail(b.ctx, nil, l, claim.RetryableFailure("timeout", "the channel did not answer"))
	case claim.StateFailedFinal:
		err = b.store.Fail(b.ctx, nil, l, claim.FinalFailure("declined", "card declined", nil))
	}
	if err != nil {
		b.t.Fatalf("finish %s: %v", name, err)
	}
	if end == claim.StateCompleted {
		b.completedAt(k, billDay.Add(10*time.Hour))
	}
	return k
}

// completedAt moves a key's completion time (test set-up: the key completed on the bill date).
func (b *bundle) completedAt(k localKey, at time.Time) {
	pgtest.Exec(b.t, b.db, `UPDATE idempotency_keys SET completed_at = ? WHERE id = ?`, at, k.ID)
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// createJob stores a recon job for the wechat channel in Asia/Shanghai.
func (b *bundle) createJob(name, source string, grace time.Duration, mod ...func(*reconcile.JobSpec)) *reconcile.ReconJob {
	b.t.Helper()
	if strings.HasPrefix(source, "/") && !strings.HasPrefix(source, os.TempDir()) {
		// A file source must be under the file root: setup's is the temporary directory.
		source = filepath.Join(os.TempDir(), source)
	}
	spec := reconcile.JobSpec{Name: name, Channel: "wechat", Format: "wechat", Source: source,
		Operations: []string{"payment.charge"}, BillDateOffsetDays: 1, CronSpec: "0 11 * * *", TimeZone: "Asia/Shanghai",
		Enabled: true, GraceSeconds: int(grace.Seconds()), ReadyDeadlineSeconds: 60}
	for _, f := range mod {
		f(&spec)
	}
	j, err := b.rec.CreateJob(b.ctx, spec)
	if err != nil {
		b.t.Fatal(err)
	}
	return j
}

// reconcileFile runs an ad hoc reconciliation of a statement for the job.
func (b *bundle) reconcileFile(job *reconcile.ReconJob, file []byte) (*reconcile.Run, error) {
	b.t.Helper()
	return b.rec.Reconcile(b.ctx, reconcile.RunRequest{Job: job, Import: reconcile.ImportRequest{
		Channel: job.Channel, Format: job.Format, BillDate: billDate, Importer: "operator:alice"}}, bytes.NewReader(file), nil)
}

// findings returns a run's findings as "KIND subject" strings, and by that string.
func (b *bundle) findings(runID int64) (map[string]reconcile.Finding, []string) {
	b.t.Helper()
	fs, err := b.rec.ListFindings(b.ctx, reconcile.FindingFilter{RunID: runID})
	if err != nil {
		b.t.Fatal(err)
	}
	m := map[string]reconcile.Finding{}
	var names []string
	for _, f := range fs {
		n := string(f.Kind) + " " + f.Subject
		if _, dup := m[n]; dup {
			b.t.Errorf("finding %s listed twice", n)
		}
		m[n] = f
		names = append(names, n)
	}
	return m, names
}

// wechatLine is one row of a generated WeChat ALL bill.
type wechatLine struct {
	At     time.Time // wall clock in Asia/Shanghai
	Txn    string
	Order  string
	Status string // SUCCESS, REFUND, CLOSED
	Amount int64  // minor units, positive
	Cur    string // default CNY
}

// wechatBill writes a WeChat ALL bill in the layout of testdata/wechat/all_trades.csv, with a
// summary row that agrees with the rows unless skew is non-zero (added to 应结订单总金额).
func wechatBill(lines []wechatLine, skew int64) []byte {
	var b strings.Builder
	b.WriteString("交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注\n")
	var settled, refunded, ordered, applied int64
	yuan := func(v int64) string { return money.Format(v, "CNY") }
	for i, l := range lines {
		cur := l.Cur
		if cur == "" {
			cur = "CNY"
		}
		at := l.At.In(shanghai).Format("2006-01-02 15:04:05")
		var settle, refund, order, apply int64
		refundNo, refundType, refundState := "0", "", ""
		switch l.Status {
		case "SUCCESS":
			settle, order = l.Amount, l.Amount
		case "REFUND":
			refund, apply = l.Amount, l.Amount
			refundNo, refundType, refundState = fmt.Sprintf("RF%08d", i), "ORIGINAL", "SUCCESS"
		default:
			order = l.Amount
		}
		settled, refunded, ordered, applied = settled+settle, refunded+refund, ordered+order, applied+apply
		fmt.Fprintf(&b, "`%s,`wx2421b1c4370ec43b,`1900000109,`0,`,`%s,`%s,`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`JSAPI,`%s,`CMB_CREDIT,`%s,`%s,`0.00,`%s,`0,`%s,`0.00,`%s,`%s,`会员月卡,`,`0.00,`0.60%%,`%s,`%s,`\n",
			at, l.Txn, l.Order, l.Status, cur, yuan(settle), refundNo, yuan(refund), refundType, refundState, yuan(order), yuan(apply))
	}
	b.WriteString("总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\n")
	fmt.Fprintf(&b, "`%d,`%s,`%s,`0.00,`0.00,`%s,`%s\n", len(lines), yuan(settled+skew), yuan(refunded), yuan(ordered), yuan(applied))
	return []byte(b.String())
}
