package reconcile

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/idemops/idemops/money"
)

// stripeParser reads Stripe's itemized payout reconciliation report
// (payout_reconciliation.itemized.5): UTF-8 CSV, major units, lower-case currency, times in
// UTC. The merchant's order number is the PaymentIntent metadata column
// payment_metadata[order_no]. The report states no control totals.
type stripeParser struct{ opts options }

func (stripeParser) Format() string { return "stripe" }

// stripeCategories maps reporting_category to a status; the empty status marks categories that
// move money but are not order lines (they are counted in Summary.Skipped). A category in
// neither set fails the row: it may be money we do not understand.
var stripeCategories = map[string]Status{
	"charge":                      StatusSuccess,
	"refund":                      StatusRefund,
	"dispute":                     StatusChargeback,
	"dispute_reversal":            StatusChargebackReversed,
	"refund_failure":              StatusRefundReversed,
	"fee":                         "",
	"payout":                      "",
	"payout_reversal":             "",
	"transfer":                    "",
	"transfer_reversal":           "",
	"other_adjustment":            "",
	"tax":                         "",
	"network_cost":                "",
	"topup":                       "",
	"topup_reversal":              "",
	"platform_earning":            "",
	"platform_earning_refund":     "",
	"connect_collection_transfer": "",
	"connect_reserved_funds":      "",
	"risk_reserved_funds":         "",
	"partial_capture_reversal":    "",
}

func (p stripeParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	cfg := readerConfig{encoding: encodingUTF8, comma: ','}
	return parseFlat(ctx, r, fn, p.Format(), p.opts, cfg, 0, func(h *header) (rowReader, error) {
		cs := columnSet{h: h}
		created := cs.need("created_utc")
		currency := cs.need("currency")
		gross := cs.need("gross")
		category := cs.need("reporting_category")
		if cs.err != nil {
			return nil, cs.err
		}
		// The channel's id for the payment: the PaymentIntent where the report has it, else the
		// charge, else the balance transaction's source (a refund's re_…).
		txnCols := []int{h.col("payment_intent_id"), h.col("charge_id"), h.col("source_id")}
		order := h.col("payment_metadata[order_no]")
		amounts := moneyColumns(h, []string{"gross", "fee", "net"}, nil)
		facing := moneyColumns(h, []string{"customer_facing_amount"}, nil)
		facingCurrency := h.col("customer_facing_currency")
		feeCol, netCol := h.col("fee"), h.col("net")
		return func(rec record) (StatementLine, string, error) {
			f := rec.fields
			var l StatementLine
			// Every money column, whatever the row's category.
			exp, err := cellExponent(rec, h, currency, trimCell)
			if err != nil {
				return l, "", err
			}
			if err := checkMoney(rec, h, amounts, exp, 0, trimCell); err != nil {
				return l, "", err
			}
			if exp, err = cellExponent(rec, h, facingCurrency, trimCell); err != nil {
				return l, "", err
			}
			if err := checkMoney(rec, h, facing, exp, 0, trimCell); err != nil {
				return l, "", err
			}
			cat := cell(f, category)
			st, known := stripeCategories[cat]
			if !known {
				return l, "", lineErrorf(rec.line, "reporting_category: unknown value %q", cat)
			}
			if st == "" {
				return l, cat, nil
			}
			l.Status = st
			for _, c := range txnCols {
				if l.ChannelTxnID = cell(f, c); l.ChannelTxnID != "" {
					break
				}
			}
			l.MerchantOrderNo = cell(f, order)
			if l.Currency, err = money.Normalize(cell(f, currency)); err != nil {
				return l, "", lineErrorf(rec.line, "currency: %v", err)
			}
			exp, _ = money.Exponent(l.Currency)
			if l.AmountMinor, err = money.ParseScaled(cell(f, gross), exp, 0); err != nil {
				return l, "", lineErrorf(rec.line, "gross: %v", err)
			}
			// net is what the balance was credited; fee = gross − net. Stripe writes the fee
			// positive (the test reports of some exports negative): either sign must agree.
			g, _ := subMinorCell(cell(f, gross), exp, 0)
			fee, _ := subMinorCell(cell(f, feeCol), exp, 0)
			if n := cell(f, netCol); n != "" {
				l.NetMinor, _ = subMinorCell(n, exp, 0)
				if l.FeeMinor, err = netOf(g, l.NetMinor); err != nil {
					return l, "", lineErrorf(rec.line, "fee: %v", err)
				}
				if cell(f, feeCol) != "" && fee != l.FeeMinor && -fee != l.FeeMinor {
					return l, "", lineErrorf(rec.line, "fee: %s is not gross − net (%s − %s)", cell(f, feeCol), cell(f, gross), n)
				}
			} else {
				l.FeeMinor = fee
				if l.NetMinor, err = netOf(g, fee); err != nil {
					return l, "", lineErrorf(rec.line, "net: %v", err)
				}
			}
			if l.OccurredAt, err = parseUTCTime(cell(f, created)); err != nil {
				return l, "", lineErrorf(rec.line, "created_utc: %v", err)
			}
			return l, "", nil
		}, nil
	})
}

// parseUTCTime reads Stripe's `2006-01-02 15:04:05` (UTC) and also accepts RFC 3339.
func parseUTCTime(s string) (time.Time, error) {
	if strings.Contains(s, "T") {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, err
		}
		return t.UTC(), nil
	}
	return parseLocalTime(s, localTimeLayout, time.UTC)
}
