package reconcile

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idemops/idemops/money"
)

// adyenParser reads Adyen's Settlement details report: UTF-8 CSV, one per payout batch. Type
// says what a row is; Psp Reference is the channel's id, Merchant Reference our order number;
// amounts are Gross Credit/Debit (GC) in Gross Currency; Creation Date is wall clock in the
// row's TimeZone. The report states no control totals.
type adyenParser struct{ opts options }

func (adyenParser) Format() string { return "adyen" }

// adyenTypes maps Type to a status; the empty status marks rows that are not order lines (fees,
// payouts, corrections), counted in Summary.Skipped. Any other Type fails the row.
var adyenTypes = map[string]Status{
	"Settled":                      StatusSuccess,
	"SettledBulk":                  StatusSuccess,
	"Refunded":                     StatusRefund,
	"RefundedBulk":                 StatusRefund,
	"RefundedExternally":           StatusRefund,
	"Chargeback":                   StatusChargeback,
	"SecondChargeback":             StatusChargeback,
	"ChargebackExternally":         StatusChargeback,
	"ChargebackReversed":           StatusChargebackReversed,
	"ChargebackReversedExternally": StatusChargebackReversed,
	"RefundedReversed":             StatusRefundReversed,
	"Fee":                          "",
	"MiscCosts":                    "",
	"MerchantPayout":               "",
	"DepositCorrection":            "",
	"InvoiceDeduction":             "",
	"ReserveAdjustment":            "",
	"Balancetransfer":              "",
	"PaidOut":                      "",
	"PaidOutReversed":              "",
}

// Settlement: a MerchantPayout row states what batch Batch Number paid out in its Net Currency
// (Net Debit − Net Credit). The batch's rows in that currency — order lines and the Fee,
// MiscCosts and other rows that are not — must add up to it.
func (p adyenParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	cfg := readerConfig{encoding: encodingUTF8, comma: ','}
	book := newSettlementBook()
	sum, err := parseFlat(ctx, r, fn, p.Format(), p.opts, cfg, 0, func(h *header) (rowReader, error) {
		cs := columnSet{h: h}
		psp := cs.need("Psp Reference")
		ref := cs.need("Merchant Reference")
		created := cs.need("Creation Date")
		zone := cs.need("TimeZone")
		kind := cs.need("Type")
		currency := cs.need("Gross Currency")
		debit := cs.need("Gross Debit (GC)")
		credit := cs.need("Gross Credit (GC)")
		if cs.err != nil {
			return nil, cs.err
		}
		netCurrency := h.col("Net Currency")
		grossMoney := moneyColumns(h, []string{"Gross Debit (GC)", "Gross Credit (GC)"}, nil)
		netMoney := moneyColumns(h, []string{"Net Debit (NC)", "Net Credit (NC)"},
			[]string{"Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)"})
		rate := h.col("Exchange Rate")
		netDebit, netCredit := h.col("Net Debit (NC)"), h.col("Net Credit (NC)")
		feeCols := moneyColumns(h, nil, []string{"Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)"})
		batchCol := h.col("Batch Number")
		return func(rec record) (StatementLine, string, error) {
			f := rec.fields
			var l StatementLine
			// Every money column, whatever the row's Type.
			exp, err := cellExponent(rec, h, currency, trimCell)
			if err != nil {
				return l, "", err
			}
			if err := checkMoney(rec, h, grossMoney, exp, 0, trimCell); err != nil {
				return l, "", err
			}
			if exp, err = cellExponent(rec, h, netCurrency, trimCell); err != nil {
				return l, "", err
			}
			if err := checkMoney(rec, h, netMoney, exp, 0, trimCell); err != nil {
				return l, "", err
			}
			if r := cell(f, rate); r != "" {
				if v, err := money.ParseScaled(r, 12, 0); err != nil || v < 0 {
					return l, "", lineErrorf(rec.line, "Exchange Rate: not a non-negative decimal: %q", r)
				}
			}
			typ := cell(f, kind)
			st, known := adyenTypes[typ]
			if !known {
				return l, "", lineErrorf(rec.line, "Type: unknown value %q", typ)
			}
			batch := cell(f, batchCol)
			if st == "" {
				if batch == "" || cell(f, netCurrency) == "" {
					return l, typ, nil
				}
				nc, err := money.Normalize(cell(f, netCurrency))
				if err != nil {
					return l, "", lineErrorf(rec.line, "Net Currency: %v", err)
				}
				exp, _ = money.Exponent(nc)
				ncr, _ := subMinorCell(cell(f, netCredit), exp, 0)
				ndr, _ := subMinorCell(cell(f, netDebit), exp, 0)
				if typ != "MerchantPayout" {
					net, err := netOf(ncr, ndr)
					if err != nil {
						return l, "", lineErrorf(rec.line, "Net Credit (NC): %v", err)
					}
					return l, typ, book.other("batch "+batch, nc, net, rec.line)
				}
				paid, err := netOf(ndr, ncr)
				if err != nil {
					return l, "", lineErrorf(rec.line, "Net Debit (NC): %v", err)
				}
				date := cell(f, created)
				if len(date) >= 10 {
					date = date[:10]
				}
				return l, typ, book.state("batch "+batch, nc, date, paid, "MerchantPayout row: Net Debit − Net Credit (NC)", rec.line)
			}
			l.Status = st
			l.ChannelTxnID = cell(f, psp)
			l.MerchantOrderNo = cell(f, ref)
			if l.Currency, err = money.Normalize(cell(f, currency)); err != nil {
				return l, "", lineErrorf(rec.line, "Gross Currency: %v", err)
			}
			exp, _ = money.Exponent(l.Currency)
			cr, dr := cell(f, credit), cell(f, debit)
			switch {
			case cr != "" && dr != "":
				return l, "", lineErrorf(rec.line, "both Gross Credit (GC) and Gross Debit (GC) are filled")
			case cr != "":
				if l.AmountMinor, err = money.ParseScaled(cr, exp, 0); err != nil {
					return l, "", lineErrorf(rec.line, "Gross Credit (GC): %v", err)
				}
			case dr != "":
				if l.AmountMinor, err = money.ParseScaled(dr, exp, 0); err != nil {
					return l, "", lineErrorf(rec.line, "Gross Debit (GC): %v", err)
				}
				l.AmountMinor = -l.AmountMinor
			default:
				return l, "", lineErrorf(rec.line, "neither Gross Credit (GC) nor Gross Debit (GC) is filled")
			}
			// Fee: the (NC) fee columns summed; net: Net Credit − Net Debit, in Net Currency.
			if nc := cell(f, netCurrency); nc != "" {
				if nc, err = money.Normalize(nc); err != nil {
					return l, "", lineErrorf(rec.line, "Net Currency: %v", err)
				}
				if nc != l.Currency {
					l.NetCurrency = nc
				}
				exp, _ = money.Exponent(nc)
			}
			for _, fc := range feeCols {
				v, _ := subMinorCell(cell(f, fc.col), exp, 0)
				var ok bool
				if l.FeeMinor, ok = addSub(l.FeeMinor, v); !ok {
					return l, "", lineErrorf(rec.line, "%s: the fee total overflows", h.names[fc.col])
				}
			}
			ncr, _ := subMinorCell(cell(f, netCredit), exp, 0)
			ndr, _ := subMinorCell(cell(f, netDebit), exp, 0)
			if l.NetMinor, err = netOf(ncr, ndr); err != nil {
				return l, "", lineErrorf(rec.line, "Net Credit (NC): %v", err)
			}
			loc, err := adyenZone(cell(f, zone))
			if err != nil {
				return l, "", lineErrorf(rec.line, "TimeZone: %v", err)
			}
			if l.OccurredAt, err = parseLocalTime(cell(f, created), localTimeLayout, loc); err != nil {
				return l, "", lineErrorf(rec.line, "Creation Date: %v", err)
			}
			if batch != "" {
				nc := l.NetCurrency
				if nc == "" {
					nc = l.Currency
				}
				if err := book.line("batch "+batch, nc, l.NetMinor, l.FeeMinor, rec.line); err != nil {
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

// adyenZoneAbbrevs are the abbreviations Adyen writes in TimeZone. An abbreviation names the
// offset in force at that moment (CET in winter, CEST in summer), so it is a fixed offset, not
// a zone with daylight-saving rules.
var adyenZoneAbbrevs = map[string]int{
	"UTC": 0, "GMT": 0, "WET": 0, "BST": 1 * hour, "WEST": 1 * hour, "CET": 1 * hour,
	"CEST": 2 * hour, "EET": 2 * hour, "EEST": 3 * hour, "MSK": 3 * hour, "GST": 4 * hour,
	"IST": 5*hour + 30*60, "SGT": 8 * hour, "HKT": 8 * hour, "AWST": 8 * hour, "JST": 9 * hour,
	"KST": 9 * hour, "AEST": 10 * hour, "AEDT": 11 * hour, "NZST": 12 * hour, "NZDT": 13 * hour,
	"AST": -4 * hour, "ADT": -3 * hour, "EST": -5 * hour, "EDT": -4 * hour, "CST": -6 * hour,
	"CDT": -5 * hour, "MST": -7 * hour, "MDT": -6 * hour, "PST": -8 * hour, "PDT": -7 * hour,
	"AKST": -9 * hour, "AKDT": -8 * hour, "HST": -10 * hour, "BRT": -3 * hour,
}

const hour = 3600 // seconds

var utcOffsetPattern = regexp.MustCompile(`^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$`)

// adyenZone reads TimeZone: an abbreviation, an IANA name, or an offset like +01:00 or GMT+1.
func adyenZone(s string) (*time.Location, error) {
	if s == "" {
		return nil, fmt.Errorf("empty time zone")
	}
	if off, ok := adyenZoneAbbrevs[strings.ToUpper(s)]; ok {
		return time.FixedZone(s, off), nil
	}
	if m := utcOffsetPattern.FindStringSubmatch(s); m != nil {
		h, _ := strconv.Atoi(m[2])
		mins := 0
		if m[3] != "" {
			mins, _ = strconv.Atoi(m[3])
		}
		if h > 14 || mins > 59 {
			return nil, fmt.Errorf("offset %q out of range", s)
		}
		off := h*hour + mins*60
		if m[1] == "-" {
			off = -off
		}
		return time.FixedZone(s, off), nil
	}
	if strings.Contains(s, "/") {
		if loc, err := time.LoadLocation(s); err == nil {
			return loc, nil
		}
	}
	return nil, fmt.Errorf("unknown time zone %q", s)
}
