package reconcile_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// stripeRow is one row of a generated Stripe itemized payout reconciliation report.
type stripeRow struct {
	category, txn, order string
	gross, fee           string // major units as written
	net                  string
}

func stripeReport(at time.Time, payout string, rows []stripeRow) []byte {
	var b strings.Builder
	b.WriteString("balance_transaction_id,created_utc,available_on_utc,currency,gross,fee,net,reporting_category,source_id,description,customer_facing_amount,customer_facing_currency,automatic_payout_id,automatic_payout_effective_at_utc,charge_id,payment_intent_id,invoice_id,payment_method_type,payment_metadata[order_no],refund_metadata[reason]\n")
	stamp := at.UTC().Format("2006-01-02 15:04:05")
	for i, r := range rows {
		charge := r.txn
		if r.category == "payout" {
			charge = ""
		}
		fmt.Fprintf(&b, "txn_%d,%s,%s,usd,%s,%s,%s,%s,%s,test,%s,usd,%s,2024-03-03 00:00:00,%s,,,card,%s,\n",
			i, stamp, stamp, r.gross, r.fee, r.net, r.category, r.txn, strings.TrimPrefix(r.gross, "-"), payout, charge, r.order)
	}
	return []byte(b.String())
}

// A payout that does not add up to its rows is a SETTLEMENT_MISMATCH (stated − computed), a
// line whose fee is not the job's schedule a FEE_MISMATCH; both are resolvable and audited, and
// a re-run updates them instead of copying them. Lines that agree make no finding.
func TestSettlementAndFeeMismatches(t *testing.T) {
	b := setup(t)
	k1 := b.key("settle-1", 4999, "USD", claim.StateCompleted)
	k2 := b.key("settle-2", 1000, "USD", claim.StateCompleted)
	job := b.createJob("stripe-daily", "/nonexistent/{date}.csv", 10*time.Minute, func(s *reconcile.JobSpec) {
		s.Channel, s.Format, s.TimeZone = "stripe", "stripe", "UTC"
		// 2.9% + 30 cents, half up to the cent, refunds keep their fee (Stripe's terms).
		s.FeeSchedule = &reconcile.FeeSchedule{RateBP: "290", FixedMinor: 30, Refunds: "kept"}
	})
	at := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	report := func(payoutNet string, k2Fee, k2Net string) []byte {
		return stripeReport(at, "po_test", []stripeRow{
			{"charge", k1.ResourceID, k1.DownstreamKey, "49.99", "1.75", "48.24"}, // 144.971 + 30 → 175 cents
			{"charge", k2.ResourceID, k2.DownstreamKey, "10.00", k2Fee, k2Net},    // 29 + 30 → 59 cents
			{"refund", "re_1", k1.DownstreamKey, "-10.00", "0.00", "-10.00"},      // kept: no fee
			{"fee", "fee_1", "", "-2.00", "0.00", "-2.00"},                        // not an order line, in the payout
			{"payout", "po_test", "", "-" + payoutNet, "0.00", "-" + payoutNet},   // what was paid out
		})
	}

	// Everything agrees: 48.24 + 9.41 − 10.00 − 2.00 = 45.65.
	run, err := b.reconcileFile(job, report("45.65", "0.59", "9.41"))
	if err != nil {
		t.Fatal(err)
	}
	if _, names := b.findings(run.ID); len(names) != 0 {
		t.Fatalf("findings %q; want none", names)
	}

	// The payout is 0.64 short and k2 was charged a cent too much.
	run, err = b.reconcileFile(job, report("45.00", "0.60", "9.40"))
	if err != nil {
		t.Fatal(err)
	}
	m, names := b.findings(run.ID)
	settle, fee := m["SETTLEMENT_MISMATCH settlement:payout po_test:USD"], m["FEE_MISMATCH fee:success:"+k2.ResourceID+":1"]
	if len(names) != 2 || settle.ID == 0 || fee.ID == 0 {
		t.Fatalf("findings %q; want one SETTLEMENT_MISMATCH of payout po_test and one FEE_MISMATCH of %s", names, k2.ResourceID)
	}
	var detail map[string]any
	if err := json.Unmarshal(settle.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(detail["stated_minor"]) != "4500" || fmt.Sprint(detail["computed_minor"]) != "4564" ||
		fmt.Sprint(detail["difference_minor"]) != "-64" || detail["date"] != "2024-03-03" {
		t.Errorf("settlement detail %s; want stated 4500, computed 4564, difference -64, date 2024-03-03", settle.Detail)
	}
	if err := json.Unmarshal(fee.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(detail["fee_minor"]) != "60" || fmt.Sprint(detail["expected_fee_minor"]) != "59" ||
		fmt.Sprint(detail["difference_minor"]) != "1" {
		t.Errorf("fee detail %s; want fee 60, expected 59, difference 1", fee.Detail)
	}

	// The same again: the same two findings, updated.
	again, err := b.reconcileFile(job, report("45.00", "0.60", "9.40"))
	if err != nil {
		t.Fatal(err)
	}
	if _, names := b.findings(again.ID); len(names) != 2 {
		t.Errorf("re-run findings %q; want the same two", names)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE kind IN ('SETTLEMENT_MISMATCH', 'FEE_MISMATCH')`); n != 2 {
		t.Errorf("%d settlement/fee findings stored; want 2 (updated, not copied)", n)
	}

	// Both resolve like every other kind, audited.
	if _, err := b.rec.Resolve(b.ctx, settle.ID, "alice", "corrected_at_channel", "asked Stripe"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.rec.Ignore(b.ctx, fee.ID, "alice", "below_threshold", "one cent"); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range b.audit.all() {
		actions = append(actions, a.Action+" "+fmt.Sprint(a.Detail["kind"]))
	}
	if got := strings.Join(actions, ","); got != "reconcile.finding.resolve SETTLEMENT_MISMATCH,reconcile.finding.ignore FEE_MISMATCH" {
		t.Errorf("audit %s", got)
	}
}

// A fee schedule is validated with the field named.
func TestFeeScheduleValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		f    reconcile.FeeSchedule
		want string
	}{
		{reconcile.FeeSchedule{RateBP: "0.6%"}, "fee_schedule.rate_bp"},
		{reconcile.FeeSchedule{RateBP: "60", Rounding: "bankers"}, "fee_schedule.rounding"},
		{reconcile.FeeSchedule{RateBP: "60", Decimals: 4}, "fee_schedule.decimals"},
		{reconcile.FeeSchedule{RateBP: "60", Refunds: "maybe"}, "fee_schedule.refunds"},
		{reconcile.FeeSchedule{RateBP: "10001"}, "fee_schedule.rate_bp"},
		{reconcile.FeeSchedule{RateBP: "60", FixedMinor: -1}, "fee_schedule.fixed_minor"},
		{reconcile.FeeSchedule{RateBP: "38.50"}, ""},
	} {
		err := tt.f.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v; want %q", tt.f, err, tt.want)
		}
	}
}

// WeChat Pay states fees to 1e-5 yuan (a 0.01 CNY charge at 2% pays 0.00020): a schedule at
// three decimals below the fen checks them exactly — 0.00020 agrees, 0.02001 on 1.00 does not —
// and the settlement, the fee total stated with five decimals, agrees.
func TestFeeMismatch_WechatFiveDecimalFees(t *testing.T) {
	b := setup(t)
	job := b.createJob("wechat-fees", "/nonexistent/{date}.csv", 10*time.Minute, func(s *reconcile.JobSpec) {
		s.FeeSchedule = &reconcile.FeeSchedule{RateBP: "200", Decimals: 3}
	})
	var rows strings.Builder
	rows.WriteString("交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注\n")
	var second localKey
	for i, l := range []struct {
		amount    int64
		yuan, fee string
	}{{1, "0.01", "0.00020"}, {100, "1.00", "0.02001"}, {37, "0.37", "0.00740"}} {
		k := b.key(fmt.Sprintf("fen-%d", i), l.amount, "CNY", claim.StateCompleted)
		if i == 1 {
			second = k
		}
		fmt.Fprintf(&rows, "`2024-03-01 10:00:0%d,`wx1,`1900000109,`0,`,`%s,`%s,`o1,`JSAPI,`SUCCESS,`CMB_CREDIT,`CNY,`%s,`0.00,`0,`0,`0.00,`0.00,`,`,`x,`,`%s,`2.00%%,`%s,`0.00,`\n",
			i, k.ResourceID, k.DownstreamKey, l.yuan, l.fee, l.yuan)
	}
	rows.WriteString("总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\n`3,`1.38,`0.00,`0.00,`0.02761,`1.38,`0.00\n")
	run, err := b.reconcileFile(job, []byte(rows.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, names := b.findings(run.ID)
	f, ok := m["FEE_MISMATCH fee:success:"+second.ResourceID+":1"]
	if len(names) != 1 || !ok {
		t.Fatalf("findings %q; want only the FEE_MISMATCH of the 1.00 charge", names)
	}
	var d map[string]any
	if err := json.Unmarshal(f.Detail, &d); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d["fee_minor"]) != "2.001" || fmt.Sprint(d["expected_fee_minor"]) != "2" || fmt.Sprint(d["difference_minor"]) != "0.001" {
		t.Errorf("detail %s; want fee 2.001 fen, expected 2, difference 0.001", f.Detail)
	}
}

// Each rounding mode of a fee schedule rounds the exact fee its way: at 0.20%, 2.50 USD pays
// 0.5 cent and 7.50 USD 1.5 cents; the bill charges 1 and 2 cents (half up).
func TestFeeSchedule_RoundingModes(t *testing.T) {
	b := setup(t)
	at := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		mode string
		want int // FEE_MISMATCH findings
	}{{"half_up", 0}, {"half_even", 1}, {"down", 2}, {"up", 0}} {
		job := b.createJob("stripe-"+tt.mode, "/nonexistent/{date}.csv", 10*time.Minute, func(s *reconcile.JobSpec) {
			s.Channel, s.Format, s.TimeZone = "stripe-"+tt.mode, "stripe", "UTC"
			s.FeeSchedule = &reconcile.FeeSchedule{RateBP: "20", Rounding: tt.mode}
		})
		k1 := b.key("round-a-"+tt.mode, 250, "USD", claim.StateCompleted)
		k2 := b.key("round-b-"+tt.mode, 750, "USD", claim.StateCompleted)
		run, err := b.reconcileFile(job, stripeReport(at, "", []stripeRow{
			{"charge", k1.ResourceID, k1.DownstreamKey, "2.50", "0.01", "2.49"},
			{"charge", k2.ResourceID, k2.DownstreamKey, "7.50", "0.02", "7.48"},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if got := run.Counts[string(reconcile.FeeMismatch)]; got != int64(tt.want) { // (the other modes' keys are LOCAL_ONLY here)
			t.Errorf("%s: counts %v; want %d FEE_MISMATCH", tt.mode, run.Counts, tt.want)
		}
	}
}
