package console

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// findingMoney is the amounts of a settlement or fee finding, each labelled and formatted with
// its currency through money (exact: the detail holds minor units with up to three decimals).
func findingMoney(f reconcile.Finding) []templates.FindingAmount {
	var d struct {
		Currency   string       `json:"currency"`
		Stated     *json.Number `json:"stated_minor"`
		Computed   *json.Number `json:"computed_minor"`
		Fee        *json.Number `json:"fee_minor"`
		Expected   *json.Number `json:"expected_fee_minor"`
		Difference *json.Number `json:"difference_minor"`
	}
	if f.Kind != reconcile.SettlementMismatch && f.Kind != reconcile.FeeMismatch {
		return nil
	}
	if json.Unmarshal(f.Detail, &d) != nil {
		return nil
	}
	var out []templates.FindingAmount
	for _, a := range []struct {
		label string
		n     *json.Number
	}{{"stated", d.Stated}, {"computed", d.Computed}, {"fee", d.Fee}, {"expected", d.Expected}, {"difference", d.Difference}} {
		if a.n != nil {
			out = append(out, templates.FindingAmount{Label: a.label, Amount: displayMinor(a.n.String(), d.Currency)})
		}
	}
	return out
}

// displayMinor renders a decimal number of minor units ("-64", "0.02") in major units with the
// currency: money.Display for whole minor units, three more decimals where the fee has them.
func displayMinor(minor, currency string) string {
	v, err := money.ParseScaled(minor, 3, 0)
	if err != nil {
		return minor + " minor units"
	}
	if v%1000 == 0 {
		return money.Display(v/1000, currency)
	}
	exp, ok := money.Exponent(currency)
	if !ok {
		return minor + " minor units of " + strconv.Quote(currency)
	}
	return money.FormatScaled(v, exp+3) + " " + currency
}

// findingSides is what a line finding's detail says of each side — the channel's status and
// amount, the local key's state and amount — and the statement line it is about (0: none, e.g.
// LOCAL_ONLY).
func findingSides(f reconcile.Finding) (channel, local templates.FindingSide, line int64) {
	var d struct {
		Line            int64   `json:"line"`
		Lines           []int64 `json:"lines"`
		ChannelStatus   string  `json:"channel_status"`
		ChannelAmount   *int64  `json:"channel_amount_minor"`
		ChannelCurrency string  `json:"channel_currency"`
		LocalState      string  `json:"local_state"`
		LocalAmount     *int64  `json:"local_amount_minor"`
		LocalCurrency   string  `json:"local_currency"`
		Currency        string  `json:"currency"`
	}
	if json.Unmarshal(f.Detail, &d) != nil {
		return channel, local, 0
	}
	line = d.Line
	if line == 0 && len(d.Lines) > 1 {
		line = d.Lines[1] // DUPLICATE_IN_FILE: the repeated line
	}
	localCurrency := d.LocalCurrency
	if localCurrency == "" && d.LocalAmount != nil {
		localCurrency = d.Currency // AMOUNT_MISMATCH: both sides in the channel's currency
	}
	// CURRENCY_MISMATCH has a currency without an amount: the side names its currency alone.
	channel = templates.FindingSide{Status: d.ChannelStatus, Amount: d.ChannelAmount, Currency: d.ChannelCurrency}
	local = templates.FindingSide{Status: d.LocalState, Amount: d.LocalAmount, Currency: localCurrency}
	return channel, local, line
}

// sideText is one side of a finding as text (status · amount, or status · currency): the export's
// cell.
func sideText(s templates.FindingSide) string {
	var parts []string
	if s.Status != "" {
		parts = append(parts, s.Status)
	}
	if s.Amount != nil {
		parts = append(parts, money.Display(*s.Amount, s.Currency))
	} else if s.Currency != "" {
		parts = append(parts, s.Currency)
	}
	return strings.Join(parts, " · ")
}
