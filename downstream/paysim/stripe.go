package paysim

import (
	"bytes"
	"fmt"
	"strings"
)

// stripeHeader is payout_reconciliation.itemized.5 with the merchant's order number in the
// payment metadata and the merchant refund number in the refund metadata.
var stripeHeader = []string{"balance_transaction_id", "created_utc", "available_on_utc", "currency", "gross", "fee",
	"net", "reporting_category", "source_id", "description", "customer_facing_amount", "customer_facing_currency",
	"automatic_payout_id", "automatic_payout_effective_at_utc", "charge_id", "payment_intent_id", "invoice_id",
	"payment_method_type", "payment_metadata[order_no]", "refund_metadata[refund_no]"}

// stripeItemized renders the itemized payout reconciliation: major units, lower-case currency,
// refunds negative; funds become available two days later and go out in one automatic payout
// per currency, listed last as a payout row (gross and net −the payout) — the settlement the
// report states.
func (s *Server) stripeItemized(d day, entries []entry) ([]byte, error) {
	available := d.start.AddDate(0, 0, 2).Format(stampLayout)
	payoutOf := func(currency string) string {
		return "po_" + sha256Sum([]byte(fmt.Sprintf("paysim|%d|payout|%s|%s", s.cfg.Seed, d.date, currency)))[:24]
	}
	rows := [][]string{stripeHeader}
	net := map[string]int64{}
	var currencies []string
	for _, e := range entries {
		c := e.charge
		cur := strings.ToLower(c.Currency)
		suffix := strings.TrimPrefix(c.ID, "ch_")
		gross, category, source, desc, refundNo := c.AmountMinor, "charge", c.ID, c.Description, ""
		txn := "txn_" + suffix
		if r := e.refund; r != nil {
			gross, category, source, desc, refundNo = -r.AmountMinor, "refund", r.ID, r.Reason, r.MerchantRefundNo
			txn = "txn_" + strings.TrimPrefix(r.ID, "re_")
		}
		fee := s.fee(e)
		if _, seen := net[c.Currency]; !seen {
			currencies = append(currencies, c.Currency)
		}
		net[c.Currency] += gross - fee
		rows = append(rows, []string{
			txn, e.at.Format(stampLayout), available, cur, formatMinor(gross, c.Currency),
			formatMinor(fee, c.Currency), formatMinor(gross-fee, c.Currency), category, source, desc,
			formatMinor(gross, c.Currency), cur, payoutOf(c.Currency), available, c.ID, "pi_" + suffix, "", "card",
			c.MerchantOrderNo, refundNo,
		})
	}
	for _, cur := range currencies {
		po := payoutOf(cur)
		out := formatMinor(-net[cur], cur)
		rows = append(rows, []string{"txn_" + strings.TrimPrefix(po, "po_"), available, available, strings.ToLower(cur), out,
			formatMinor(0, cur), out, "payout", po, "STRIPE PAYOUT", "", "", po, available, "", "", "", "", "", ""})
	}
	var buf bytes.Buffer
	if err := csvRows(&buf, rows); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
