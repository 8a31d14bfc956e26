package reconcile

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemops/idemops/money"
)

// FeeSchedule is a channel's fee for a line, as the merchant's contract states it: a rate of
// the line's amount plus a fixed part per charge, rounded as the channel rounds. A recon job
// carries one (or none); matching compares each charge and refund line's fee with it and
// records a FEE_MISMATCH where they differ. Lines whose net is in another currency than their
// amount (Adyen cross-currency) and chargebacks are not checked.
type FeeSchedule struct {
	// RateBP is the rate in basis points, a decimal with at most four decimals: "60" is 0.60%,
	// "290" is 2.9%, "38.5" is 0.385%.
	RateBP string `json:"rate_bp"`
	// FixedMinor is added to the fee of a charge, in the line currency's minor units.
	FixedMinor int64 `json:"fixed_minor,omitempty"`
	// Rounding is how the exact fee is rounded: half_up (half away from zero, the default),
	// half_even, down (toward zero) or up (away from zero).
	Rounding string `json:"rounding,omitempty"`
	// Decimals is the precision the fee is rounded to, in decimals below the minor unit: 0 (whole
	// fen, cents), up to 3 (WeChat Pay states fees to 1e-5 yuan: 3 decimals of a fen).
	Decimals int `json:"decimals,omitempty"`
	// Refunds says what a refund line's fee is: "returned" (the rate part of the fee comes back,
	// a negative fee: WeChat Pay, Alipay) or "kept" (no fee on a refund: Stripe, Adyen). Default
	// returned.
	Refunds string `json:"refunds,omitempty"`
}

// The rounding modes and refund policies a FeeSchedule accepts.
var (
	FeeRoundings = []string{"half_up", "half_even", "down", "up"}
	FeeRefunds   = []string{"returned", "kept"}
)

// Validate fills the defaults and checks every field; the error names the first wrong one
// (fee_schedule.rate_bp, …).
func (f *FeeSchedule) Validate() error {
	f.RateBP = strings.TrimSpace(f.RateBP)
	if f.Rounding == "" {
		f.Rounding = "half_up"
	}
	if f.Refunds == "" {
		f.Refunds = "returned"
	}
	rate, err := money.ParseScaled(f.RateBP, 4, 0)
	switch {
	case err != nil:
		return invalidf("fee_schedule.rate_bp", "%q is not a decimal number of basis points (at most 4 decimals)", f.RateBP)
	case rate < 0 || rate > 10000*10000:
		return invalidf("fee_schedule.rate_bp", "%s is outside 0..10000 basis points", f.RateBP)
	case f.FixedMinor < 0 || f.FixedMinor > 1_000_000_000:
		return invalidf("fee_schedule.fixed_minor", "%d is outside 0..1000000000", f.FixedMinor)
	case !contains(FeeRoundings, f.Rounding):
		return invalidf("fee_schedule.rounding", "%q is not one of %s", f.Rounding, strings.Join(FeeRoundings, ", "))
	case f.Decimals < 0 || f.Decimals > subMinorDecimals:
		return invalidf("fee_schedule.decimals", "%d is outside 0..%d", f.Decimals, subMinorDecimals)
	case !contains(FeeRefunds, f.Refunds):
		return invalidf("fee_schedule.refunds", "%q is not one of %s", f.Refunds, strings.Join(FeeRefunds, ", "))
	}
	f.RateBP = money.FormatScaled(rate, 4)
	f.RateBP = strings.TrimSuffix(strings.TrimRight(f.RateBP, "0"), ".")
	return nil
}

// String is the schedule for people: "0.6% + 0 minor, half_up to 0 decimals, refunds returned".
func (f *FeeSchedule) String() string {
	return fmt.Sprintf("%s bp + %d minor, %s to %d decimals below the minor unit, refund fees %s",
		f.RateBP, f.FixedMinor, f.Rounding, f.Decimals, f.Refunds)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// feeScheduleJSON is the stored form (recon_jobs.fee_schedule), nil for none.
func feeScheduleJSON(f *FeeSchedule) any {
	if f == nil {
		return nil
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// feeFindingsSQL compares each charge and refund line of a statement with the fee the schedule
// gives it, in numeric (exact): the rate part is |amount| × rate / 10000 minor units, a charge
// adds the fixed part, the sum is rounded to $5 decimals below the minor unit by mode $4, and a
// refund's fee is the rate part negated ("returned") or zero ("kept"). One pass over the
// statement's lines (the BRIN index on statement_id finds them); only the lines that differ
// are numbered, so a partial refund's finding keeps its subject across re-runs.
//
// $1 statement, $2 rate in basis points, $3 fixed minor, $4 rounding, $5 decimals, $6 refunds
// policy, $7 the schedule as JSON for the finding's detail.
const feeFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT 'FEE_MISMATCH',
       'fee:' || status || ':' || COALESCE(NULLIF(channel_txn_id, ''), merchant_order_no) || ':' ||
           row_number() OVER (PARTITION BY status, channel_txn_id, merchant_order_no ORDER BY line_no),
       NULL, id,
       jsonb_build_object('line', line_no, 'channel_txn_id', channel_txn_id, 'merchant_order_no', merchant_order_no,
           'channel_status', status, 'channel_amount_minor', amount_minor, 'currency', currency,
           'fee_minor', fee_subminor / 1000.0, 'expected_fee_minor', expected / 1000.0,
           'difference_minor', (fee_subminor - expected) / 1000.0, 'schedule', $7::jsonb)
FROM (
    SELECT l.id, l.line_no, l.channel_txn_id, l.merchant_order_no, l.status, l.amount_minor, l.currency, l.fee_subminor,
           (CASE WHEN l.status = 'refund' AND $6 = 'kept' THEN 0
                 ELSE sign(l.amount_minor) * (r.rounded * power(10::numeric, 3 - $5::int)) END)::bigint AS expected
    FROM statement_lines l
    CROSS JOIN LATERAL (SELECT (abs(l.amount_minor) * $2::numeric / 10000
                                + CASE WHEN l.status = 'success' THEN $3::bigint ELSE 0 END) * power(10::numeric, $5::int) AS x) e
    CROSS JOIN LATERAL (SELECT CASE $4
        WHEN 'down' THEN trunc(e.x)
        WHEN 'up' THEN ceil(e.x)
        WHEN 'half_even' THEN CASE WHEN e.x - floor(e.x) = 0.5 THEN floor(e.x) + mod(floor(e.x), 2) ELSE round(e.x) END
        ELSE round(e.x) END AS rounded) r
    WHERE l.statement_id = $1 AND l.status IN ('success', 'refund') AND l.net_currency IS NULL
) f
WHERE fee_subminor <> expected`

// settlementFindingsSQL turns each settlement the statement states (statements.summary ->
// settlements, written by the parser) that differs from its rows into a finding, one per group
// and currency.
const settlementFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT 'SETTLEMENT_MISMATCH', 'settlement:' || (s->>'group') || ':' || (s->>'currency'), NULL, NULL,
       s || jsonb_build_object('date', COALESCE(NULLIF(s->>'date', ''), to_char(st.bill_date, 'YYYY-MM-DD')))
FROM statements st CROSS JOIN LATERAL jsonb_array_elements(COALESCE(st.summary->'settlements', '[]'::jsonb)) s
WHERE st.id = $1 AND (s->>'difference_minor')::numeric <> 0`
