package reconcile_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// channelOnly makes a failed_retryable key whose charge the channel has (a lost completion),
// reconciles, and returns the CHANNEL_ONLY finding.
func channelOnly(b *bundle, name string) (localKey, reconcile.Finding) {
	b.t.Helper()
	k := b.key(name, 12300, "CNY", claim.StateFailedRetryable)
	b.op.docs[k.DownstreamKey] = &claim.Document{ResourceID: "ch_" + name, Body: json.RawMessage(`{"status":"succeeded"}`)}
	job, err := b.rec.GetJob(b.ctx, "wechat-daily")
	if err != nil {
		job = b.createJob("wechat-daily", "/nonexistent/{date}.csv", 0)
	}
	file := wechatBill([]wechatLine{{At: billDay.Add(9 * time.Hour), Txn: "4200" + name, Order: k.DownstreamKey, Status: "SUCCESS", Amount: 12300}}, 0)
	run, err := b.reconcileFile(job, file)
	if err != nil {
		b.t.Fatal(err)
	}
	got, names := b.findings(run.ID)
	f, ok := got["CHANNEL_ONLY key:"+itoa(k.ID)]
	if !ok {
		b.t.Fatalf("findings %q; want CHANNEL_ONLY for key %d", names, k.ID)
	}
	return k, f
}

func TestRecover_ChannelOnlyForAFailedRetryableKeyGoesThroughTheClaimLogic(t *testing.T) {
	b := setup(t)
	k, f := channelOnly(b, "lost")
	rec, err := b.rec.Recover(b.ctx, f.ID, "alice", "the channel has the charge")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != claim.Recovered || rec.State != claim.StateCompleted || rec.Finding.State != reconcile.FindingResolved ||
		*rec.Finding.ReasonCode != "recovered" || *rec.Finding.Resolver != "operator:alice" {
		t.Fatalf("recovery %+v finding %+v", rec, rec.Finding)
	}
	key, err := b.store.Get(b.ctx, k.ID)
	if err != nil || key.State != claim.StateCompleted || key.ResourceID == nil || *key.ResourceID != "ch_lost" {
		t.Fatalf("key %+v %v", key, err)
	}
	// The claim logic recorded it: taken over and recovered by the operator.
	evs, _ := b.store.History(b.ctx, k.ID, 0)
	var recovered, takenOver bool
	for _, e := range evs {
		recovered = recovered || (e.Kind == "recovered_from_downstream" && e.Actor == "operator:alice")
		takenOver = takenOver || (e.Kind == "taken_over" && e.Actor == "operator:alice")
	}
	if !recovered || !takenOver {
		t.Errorf("key events %+v: want taken_over and recovered_from_downstream by operator:alice", evs)
	}
	if b.op.executes != 0 {
		t.Errorf("recover executed the charge %d times", b.op.executes)
	}
	audit := b.audit.all()
	if len(audit) != 1 || audit[0].Actor != "operator:alice" || audit[0].Action != "reconcile.finding.recover" ||
		audit[0].Target != "finding:"+itoa(f.ID) {
		t.Errorf("audit %+v", audit)
	}
	// A re-run now finds nothing for the key.
	job, _ := b.rec.GetJob(b.ctx, "wechat-daily")
	run, err := b.reconcileFile(job, wechatBill([]wechatLine{{At: billDay.Add(9 * time.Hour), Txn: "4200lost", Order: k.DownstreamKey,
		Status: "SUCCESS", Amount: 12300}}, 0))
	if err != nil || len(run.Counts) != 0 {
		t.Errorf("re-run after recovery: %v counts %v", err, run.Counts)
	}
}

func TestRecover_IsRefusedForACompletedKey(t *testing.T) {
	b := setup(t)
	k, f := channelOnly(b, "late")
	// The client's own retry completes the key through the claim logic first.
	out, err := b.store.Claim(b.ctx, claim.Request{Tenant: "t1", Operation: "payment.charge", Key: "late",
		Intent: json.RawMessage(`{"amount_minor": 12300, "currency": "CNY", "payee": "acme"}`), Spec: b.op.Intent()})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("retry claim %+v %v", out, err)
	}
	if err := b.store.Complete(b.ctx, nil, out.Lease, &claim.Snapshot{Status: 201, ResourceID: "ch_late"}); err != nil {
		t.Fatal(err)
	}
	_, err = b.rec.Recover(b.ctx, f.ID, "alice", "")
	if !errors.Is(err, reconcile.ErrCannotRecover) || !strings.Contains(err.Error(), "completed") {
		t.Fatalf("err %v; want ErrCannotRecover naming the completed state", err)
	}
	if got, _ := b.rec.GetFinding(b.ctx, f.ID); got.State != reconcile.FindingOpen {
		t.Errorf("finding %s after a refused recover", got.State)
	}
	evs, _ := b.store.History(b.ctx, k.ID, 0)
	for _, e := range evs {
		if e.Actor == "operator:alice" {
			t.Errorf("a refused recover touched the key: %+v", e)
		}
	}
	if len(b.audit.all()) != 0 {
		t.Errorf("a refused recover was audited as done: %+v", b.audit.all())
	}
}

func TestRecover_IsRefusedForKindsAndLinesItDoesNotApplyTo(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	run, err := b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.findings(run.ID)
	for _, name := range []string{
		"AMOUNT_MISMATCH key:" + itoa(w.keys["amount"].ID),            // not a recoverable kind
		"STATUS_MISMATCH key:" + itoa(w.keys["closed-at-channel"].ID), // the channel did not succeed
		"STATUS_MISMATCH key:" + itoa(w.keys["declined-locally"].ID),  // failed_final: not replayable
		"CHANNEL_ONLY txn:4200000004",                                 // no local key
	} {
		if _, err := b.rec.Recover(b.ctx, got[name].ID, "alice", ""); !errors.Is(err, reconcile.ErrCannotRecover) {
			t.Errorf("%s: err %v; want ErrCannotRecover", name, err)
		}
	}
}

func TestResolveAndIgnore_AreAuditedAndCloseTheFindingOnce(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	run, err := b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.findings(run.ID)
	amount := got["AMOUNT_MISMATCH key:"+itoa(w.keys["amount"].ID)]
	dup := got["DUPLICATE_IN_FILE txn:4200000012"]

	// The reason is one of the vocabulary; "other" needs a note.
	for _, bad := range []struct{ code, note string }{{"Bad Code", ""}, {"surcharge_at_channel", ""}, {"", "no code"},
		{"退款", "客户要求"}, {"other", ""}} {
		if _, err := b.rec.Resolve(b.ctx, amount.ID, "bob", bad.code, bad.note); !errors.Is(err, reconcile.ErrInvalid) {
			t.Errorf("reason %q note %q: %v; want ErrInvalid", bad.code, bad.note, err)
		}
	}
	res, err := b.rec.Resolve(b.ctx, amount.ID, "bob", "corrected_at_channel", "the channel added a 10 CNY fee")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != reconcile.FindingResolved || *res.Resolver != "operator:bob" || *res.ReasonCode != "corrected_at_channel" ||
		*res.Note != "the channel added a 10 CNY fee" || res.ResolvedAt == nil {
		t.Errorf("resolved %+v", res)
	}
	if _, err := b.rec.Resolve(b.ctx, amount.ID, "bob", "corrected_locally", ""); !errors.Is(err, reconcile.ErrClosed) {
		t.Errorf("resolving twice: %v; want ErrClosed", err)
	}
	if _, err := b.rec.Ignore(b.ctx, dup.ID, "bob", "", "known export bug"); !errors.Is(err, reconcile.ErrInvalid) {
		t.Errorf("ignore without a reason: %v", err)
	}
	ign, err := b.rec.Ignore(b.ctx, dup.ID, "bob", "known_channel_issue", "known export bug at the channel")
	if err != nil || ign.State != reconcile.FindingIgnored {
		t.Fatalf("ignore: %+v %v", ign, err)
	}
	audit := b.audit.all()
	if len(audit) != 2 || audit[0].Action != "reconcile.finding.resolve" || audit[1].Action != "reconcile.finding.ignore" ||
		audit[0].Actor != "operator:bob" || audit[0].Detail["reason_code"] != "corrected_at_channel" || audit[1].Target != "finding:"+itoa(dup.ID) {
		t.Errorf("audit %+v", audit)
	}

	// No unaudited resolution: when the audit cannot be written the finding stays open.
	b.audit.fail = errors.New("audit log unavailable")
	local := got["LOCAL_ONLY key:"+itoa(w.keys["local-only"].ID)]
	if _, err := b.rec.Resolve(b.ctx, local.ID, "bob", "booked_other_day", ""); err == nil {
		t.Fatal("resolve succeeded without an audit record")
	}
	if f, _ := b.rec.GetFinding(b.ctx, local.ID); f.State != reconcile.FindingOpen {
		t.Errorf("finding %s without an audit record", f.State)
	}
	b.audit.fail = nil

	// A re-run keeps the operators' verdicts.
	run2, err := b.reconcileFile(job, wechatBill(w.lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	after, _ := b.findings(run2.ID)
	if f := after["AMOUNT_MISMATCH key:"+itoa(w.keys["amount"].ID)]; f.State != reconcile.FindingResolved {
		t.Errorf("re-run reopened a resolved finding: %s", f.State)
	}
	open, err := b.rec.ListFindings(b.ctx, reconcile.FindingFilter{State: reconcile.FindingOpen, Channel: "wechat", BillDate: billDate})
	if err != nil || len(open) != len(w.want)-2 {
		t.Errorf("%d open findings, want %d (%v)", len(open), len(w.want)-2, err)
	}
	if _, err := b.rec.ListFindings(b.ctx, reconcile.FindingFilter{Kind: "NOPE"}); !errors.Is(err, reconcile.ErrInvalid) {
		t.Errorf("bad kind filter: %v", err)
	}
}
