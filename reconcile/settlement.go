package reconcile

import (
	"fmt"
	"sort"

	"github.com/idemops/idemops/money"
)

// Settlement is one amount a statement states was settled — paid out, or credited, for a bill
// day (WeChat Pay, Alipay), a payout (Stripe) or a batch (Adyen) in one currency — next to
// what the statement's own rows add up to. A difference is not a corrupt file (the control
// totals say that) but money that did not arrive as the rows say it should: matching turns it
// into a SETTLEMENT_MISMATCH finding.
type Settlement struct {
	// Group is what was settled: "bill" (the whole bill day), "payout po_…", "batch 42".
	Group string `json:"group"`
	// Date is the day the statement dates the settlement (YYYY-MM-DD); empty: the bill date.
	Date     string `json:"date,omitempty"`
	Currency string `json:"currency"`
	// Stated is the settled amount as the statement states it.
	Stated SubMinor `json:"stated_minor"`
	// Lines counts the group's order lines; LinesNet sums their net, Fees their fee.
	Lines    int      `json:"lines"`
	LinesNet SubMinor `json:"lines_net_minor"`
	Fees     SubMinor `json:"fees_minor"`
	// OtherNet sums the group's rows that are not order lines (Stripe fee rows, Adyen Fee and
	// MiscCosts rows): they move the settled amount too.
	OtherNet SubMinor `json:"other_net_minor"`
	// Computed is what the rows say was settled, rounded where the channel rounds (WeChat Pay
	// rounds its fee total): LinesNet + OtherNet, with Fees replaced by Fees rounded.
	Computed SubMinor `json:"computed_minor"`
	// Difference is Stated − Computed; zero when the settlement agrees.
	Difference SubMinor `json:"difference_minor"`
	// Source says where the statement states it; Line is that physical line (of the summary
	// file, for Alipay's 汇总).
	Source string `json:"source"`
	Line   int    `json:"line"`
	// feeDecimals, when ≥ 0, is how many decimals of the major unit the channel rounds the fee
	// total to before subtracting it; -1: fees are summed exactly.
	feeDecimals int
	stated      bool
}

// OK reports whether the stated settlement agrees with the rows.
func (s Settlement) OK() bool { return s.Difference == 0 }

// SettlementsOK reports whether every settlement the statement states agrees with its rows.
func (s *Summary) SettlementsOK() bool {
	for _, st := range s.Settlements {
		if !st.OK() {
			return false
		}
	}
	return true
}

type settlementKey struct{ group, currency string }

// settlementBook collects, per group and currency, the nets of a statement's rows and the
// settlements it states, while the parser streams: a map entry per group, never per line.
type settlementBook struct {
	groups map[settlementKey]*Settlement
}

func newSettlementBook() *settlementBook {
	return &settlementBook{groups: map[settlementKey]*Settlement{}}
}

func (b *settlementBook) get(group, currency string) *Settlement {
	k := settlementKey{group, currency}
	s := b.groups[k]
	if s == nil {
		s = &Settlement{Group: group, Currency: currency, feeDecimals: -1}
		b.groups[k] = s
	}
	return s
}

// line adds an order line's net and fee to its group.
func (b *settlementBook) line(group, currency string, net, fee SubMinor, lineNo int) error {
	s := b.get(group, currency)
	var ok1, ok2 bool
	s.LinesNet, ok1 = addSub(s.LinesNet, net)
	s.Fees, ok2 = addSub(s.Fees, fee)
	if !ok1 || !ok2 {
		return lineErrorf(lineNo, "the %s settlement total overflows", currency)
	}
	s.Lines++
	return nil
}

// other adds the net of a row that is not an order line to its group.
func (b *settlementBook) other(group, currency string, net SubMinor, lineNo int) error {
	s := b.get(group, currency)
	var ok bool
	if s.OtherNet, ok = addSub(s.OtherNet, net); !ok {
		return lineErrorf(lineNo, "the %s settlement total overflows", currency)
	}
	return nil
}

// state records the settlement a statement states for a group and currency; a second one for
// the same pair is an error (one payout row per payout, one MerchantPayout per batch and
// currency).
func (b *settlementBook) state(group, currency, date string, stated SubMinor, source string, lineNo int) error {
	s := b.get(group, currency)
	if s.stated {
		return lineErrorf(lineNo, "a second settlement for %s in %s (the first is line %d)", group, currency, s.Line)
	}
	s.stated, s.Stated, s.Date, s.Source, s.Line = true, stated, date, source, lineNo
	return nil
}

// settlements returns the stated settlements with what the rows computed, by group and
// currency. Groups the statement states no settlement for are left out: there is nothing to
// compare them with.
func (b *settlementBook) settlements() ([]Settlement, error) {
	var out []Settlement
	for _, s := range b.groups {
		if !s.stated {
			continue
		}
		computed, ok := addSub(s.LinesNet, s.OtherNet)
		if !ok {
			return nil, fmt.Errorf("the %s settlement of %s overflows", s.Currency, s.Group)
		}
		if s.feeDecimals >= 0 {
			computed += s.Fees - roundSubMinor(s.Fees, s.Currency, s.feeDecimals)
		}
		s.Computed = computed
		if s.Difference, ok = addSub(s.Stated, -computed); !ok {
			return nil, fmt.Errorf("the %s settlement of %s overflows", s.Currency, s.Group)
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Currency < out[j].Currency
	})
	return out, nil
}

// roundSubMinor rounds v (thousandths of a minor unit of currency) to decimals of the major
// unit, half away from zero — WeChat Pay's rounding of its fee total.
func roundSubMinor(v SubMinor, currency string, decimals int) SubMinor {
	exp := currencyExponent(currency)
	drop := exp + subMinorDecimals - decimals
	if drop <= 0 {
		return v
	}
	unit := int64(1)
	for i := 0; i < drop; i++ {
		unit *= 10
	}
	return SubMinor(roundHalfAway(int64(v), unit))
}

// roundHalfAway rounds v to a multiple of unit, half away from zero.
func roundHalfAway(v, unit int64) int64 {
	q, r := v/unit, v%unit
	if r < 0 {
		r = -r
	}
	if 2*r >= unit {
		if v < 0 {
			q--
		} else {
			q++
		}
	}
	return q * unit
}

// currencyExponent is the ISO 4217 exponent of a normalized currency (2 for one the table does
// not know; parsers only emit known ones).
func currencyExponent(currency string) int {
	if exp, ok := money.Exponent(currency); ok {
		return exp
	}
	return 2
}
