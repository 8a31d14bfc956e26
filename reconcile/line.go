package reconcile

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/idemops/idemops/money"
)

// Status is what a statement line says happened to the money, normalized over all formats.
type Status string

// The statuses a statement line can carry. Amounts are signed from the merchant's side:
// success and the reversals are positive, refund and chargeback negative.
const (
	StatusSuccess            Status = "success"             // the charge was collected
	StatusRefund             Status = "refund"              // money went back to the payer
	StatusFailed             Status = "failed"              // listed, but not paid (closed, revoked, not paid)
	StatusChargeback         Status = "chargeback"          // the payer's bank took the money back
	StatusChargebackReversed Status = "chargeback_reversed" // a chargeback was won back
	StatusRefundReversed     Status = "refund_reversed"     // a refund bounced back to the merchant
)

var statuses = []Status{StatusSuccess, StatusRefund, StatusFailed, StatusChargeback,
	StatusChargebackReversed, StatusRefundReversed}

// Valid reports whether s is one of the normalized statuses.
func (s Status) Valid() bool {
	for _, v := range statuses {
		if s == v {
			return true
		}
	}
	return false
}

// sign is the sign an amount of this status must carry: +1, -1, or 0 for either.
func (s Status) sign() int {
	switch s {
	case StatusSuccess, StatusChargebackReversed, StatusRefundReversed:
		return 1
	case StatusRefund, StatusChargeback:
		return -1
	}
	return 0
}

// StatementLine is one order-related row of a channel statement, normalized. Strings are
// trimmed and stripped of format decoration (WeChat's backtick, Alipay's trailing TAB).
type StatementLine struct {
	LineNo          int       `json:"line_no"`           // physical line in the file (1-based)
	ChannelTxnID    string    `json:"channel_txn_id"`    // the channel's transaction id
	MerchantOrderNo string    `json:"merchant_order_no"` // our downstream key, as we sent it
	AmountMinor     int64     `json:"amount_minor"`      // exact minor units, signed (refunds negative)
	Currency        string    `json:"currency"`          // ISO 4217, upper case
	Status          Status    `json:"status"`
	OccurredAt      time.Time `json:"occurred_at"` // UTC
	// FeeMinor is the channel's fee for the line, positive when charged (a fee returned on a
	// refund is negative); NetMinor is what the merchant is credited for the line (refunds
	// negative). Both are exact at the channel's precision: SubMinor, thousandths of a minor
	// unit, because WeChat Pay states fees to 1e-5 yuan. Both are in NetCurrency when it is set
	// (Adyen settles in another currency than the gross), otherwise in Currency.
	FeeMinor    SubMinor `json:"fee_minor"`
	NetMinor    SubMinor `json:"net_minor"`
	NetCurrency string   `json:"net_currency,omitempty"`
	// Raw is the row exactly as the file has it, decoded to UTF-8, without the line terminator
	// (a record spanning lines keeps its inner newlines). Summary.Header names its columns.
	Raw string `json:"raw"`
}

// Summary describes one parsed statement: what was read and the control totals it stated.
type Summary struct {
	Format string `json:"format"`
	// Header is the detail header row as written, naming the columns of StatementLine.Raw.
	Header []string `json:"header"`
	// Lines is the number of order lines handed to the callback.
	Lines int `json:"lines"`
	// Skipped counts detail rows that are not order lines (Stripe fees and payouts, Adyen
	// MerchantPayout, profile rows mapped to "skip"), by the row's own type.
	Skipped map[string]int `json:"skipped,omitempty"`
	// TotalMinor is the signed sum of AmountMinor over all lines; ByCurrency splits it.
	TotalMinor int64            `json:"total_minor"`
	ByCurrency map[string]int64 `json:"by_currency,omitempty"`
	// Bytes is the size of the statement as read (after decompression, before decoding).
	Bytes int64 `json:"bytes"`
	// Control holds the statement's own totals (WeChat summary row, Alipay footer) against the
	// totals computed from the detail rows. Nil when the format states none (Stripe, Adyen).
	Control *ControlTotals `json:"control_totals"`
	// Settlements are the amounts the statement states were settled (WeChat's summary row,
	// Alipay's 汇总 file, Stripe payout rows, Adyen MerchantPayout rows), each next to the net
	// its rows add up to. Empty when the statement states none.
	Settlements []Settlement `json:"settlements,omitempty"`
}

// ControlTotalsOK reports whether the statement's control totals agree with its detail rows.
// A format without control totals has nothing to contradict, so it reports true.
func (s *Summary) ControlTotalsOK() bool { return s.Control == nil || s.Control.OK() }

// SkippedRows is the number of detail rows that were not order lines.
func (s *Summary) SkippedRows() int {
	n := 0
	for _, c := range s.Skipped {
		n += c
	}
	return n
}

// Currencies returns the currencies of the lines, sorted.
func (s *Summary) Currencies() []string {
	out := make([]string, 0, len(s.ByCurrency))
	for c := range s.ByCurrency {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func newSummary(format string) *Summary {
	return &Summary{Format: format, ByCurrency: map[string]int64{}}
}

func (s *Summary) skip(kind string) {
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[kind]++
}

// ControlTotals are the totals a statement states about itself, each next to the value computed
// from its detail rows.
type ControlTotals struct {
	Line   int            `json:"line"`   // physical line of the summary row or footer line
	Source string         `json:"source"` // e.g. "summary row", "footer"
	Checks []ControlCheck `json:"checks"`
}

// ControlCheck is one stated total and the value the detail rows add up to. Stated and Computed
// are decimal text in major units (or a count), as the statement writes them.
type ControlCheck struct {
	Name     string `json:"name"` // the statement's own label, e.g. 总交易单数
	Stated   string `json:"stated"`
	Computed string `json:"computed"`
	OK       bool   `json:"ok"`
}

// OK reports whether every check agrees.
func (c *ControlTotals) OK() bool {
	for _, ch := range c.Checks {
		if !ch.OK {
			return false
		}
	}
	return true
}

// Mismatches describes the checks that disagree, e.g. `总交易单数 stated 5, computed 4`.
func (c *ControlTotals) Mismatches() string {
	var parts []string
	for _, ch := range c.Checks {
		if !ch.OK {
			parts = append(parts, fmt.Sprintf("%s stated %s, computed %s", ch.Name, ch.Stated, ch.Computed))
		}
	}
	return strings.Join(parts, "; ")
}

func (c *ControlTotals) addCount(name string, stated, computed int) {
	c.Checks = append(c.Checks, ControlCheck{Name: name, Stated: fmt.Sprint(stated),
		Computed: fmt.Sprint(computed), OK: stated == computed})
}

// addAmount records a check of two decimals held at controlScale.
func (c *ControlTotals) addAmount(name string, stated, computed int64) {
	c.Checks = append(c.Checks, ControlCheck{Name: name, Stated: formatControl(stated),
		Computed: formatControl(computed), OK: stated == computed})
}

// controlScale is the fixed-point scale control totals are summed at: exact for every currency
// exponent and for fee columns that carry more decimals than the currency.
const controlScale = 6

// parseControl reads a control total at controlScale; thousands as for money.ParseScaled.
func parseControl(s string, thousands byte) (int64, error) {
	return money.ParseScaled(s, controlScale, thousands)
}

// formatControl renders a controlScale value with at least two decimals, trailing zeros trimmed.
func formatControl(v int64) string {
	s := money.FormatScaled(v, controlScale)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	return s
}

// SubMinor is an exact amount in thousandths of a currency's minor unit (1e-5 yuan for CNY):
// fine enough for every fee a channel states per line. JSON writes it in minor units, as an
// exact decimal number: 63, 0.02, -16.83.
type SubMinor int64

// subMinorDecimals is the number of decimals a SubMinor carries below the minor unit.
const subMinorDecimals = 3

// Minor converts whole minor units to a SubMinor (false on overflow).
func toSubMinor(minor int64) (SubMinor, bool) {
	const f = 1000
	if minor > (1<<63-1)/f || minor < -(1<<63-1)/f {
		return 0, false
	}
	return SubMinor(minor * f), true
}

// String renders the value in minor units, trailing zeros of the fraction trimmed.
func (v SubMinor) String() string {
	s := money.FormatScaled(int64(v), subMinorDecimals)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// MarshalJSON writes the exact decimal number of minor units.
func (v SubMinor) MarshalJSON() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalJSON reads a decimal number of minor units with at most three decimals.
func (v *SubMinor) UnmarshalJSON(b []byte) error {
	n, err := money.ParseScaled(string(b), subMinorDecimals, 0)
	if err != nil {
		return errors.New("fee/net: " + err.Error())
	}
	*v = SubMinor(n)
	return nil
}
