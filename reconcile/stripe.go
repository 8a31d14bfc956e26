package reconcile

import (
	"context"
	"fmt"
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

// Settlement: a payout row (reporting_category payout) states what payout automatic_payout_id
// paid out: −net. The rows of that payout — order lines and the fees and adjustments that are
// not — must add up to it.
func (p stripeParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	cfg := readerConfig{encoding: encodingUTF8, comma: ','}
	book := newSettlementBook()
	sum, err := parseFlat(ctx, r, fn, p.Format(), p.opts, cfg, 0, func(h *header) (rowReader, error) {
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
		payoutCol, payoutAt := h.col("automatic_payout_id"), h.col("automatic_payout_effective_at_utc")
		sourceCol := h.col("source_id")
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
			payout := cell(f, payoutCol)
			if st == "" {
				if cat == "payout" && payout == "" {
					payout = cell(f, sourceCol) // a payout row names itself in source_id
				}
				if payout == "" {
					return l, cat, nil
				}
				cur, err := money.Normalize(cell(f, currency))
				if err != nil {
					return l, "", lineErrorf(rec.line, "currency: %v", err)
				}
				exp, _ = money.Exponent(cur)
				net, err := subMinorCell(cell(f, netCol), exp, 0)
				if netCol < 0 || cell(f, netCol) == "" {
					g, _ := subMinorCell(cell(f, gross), exp, 0)
					fee, _ := subMinorCell(cell(f, feeCol), exp, 0)
					net, err = netOf(g, fee)
				}
				if err != nil {
					return l, "", lineErrorf(rec.line, "net: %v", err)
				}
				if cat != "payout" {
					return l, cat, book.other("payout "+payout, cur, net, rec.line)
				}
				date := cell(f, payoutAt)
				if date == "" {
					date = cell(f, created)
				}
				if len(date) >= 10 {
					date = date[:10]
				}
				return l, cat, book.state("payout "+payout, cur, date, -net, "payout row: −net", rec.line)
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
			if payout != "" {
				if err := book.line("payout "+payout, l.Currency, l.NetMinor, l.FeeMinor, rec.line); err != nil {
					return l, "", err
				}
			}
			return l, "", nil
		}, nil
	})
	if err != nil {
		return sum, err
	}
	if sum.Settlements, err = book.settlements(); err != nil {
		return sum, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return sum, nil
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
