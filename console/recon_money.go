package console

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
)

// findingMoney formats the amounts of a settlement or fee finding with their currency through
// money (exact: the detail holds minor units with up to three decimals).
func findingMoney(f reconcile.Finding) string {
	var d struct {
		Currency   string       `json:"currency"`
		Stated     *json.Number `json:"stated_minor"`
		Computed   *json.Number `json:"computed_minor"`
		Fee        *json.Number `json:"fee_minor"`
		Expected   *json.Number `json:"expected_fee_minor"`
		Difference *json.Number `json:"difference_minor"`
	}
	if f.Kind != reconcile.SettlementMismatch && f.Kind != reconcile.FeeMismatch {
		return ""
	}
	if json.Unmarshal(f.Detail, &d) != nil {
		return ""
	}
	show := func(label string, n *json.Number) string {
		if n == nil {
			return ""
		}
		return label + " " + displayMinor(n.String(), d.Currency)
	}
	parts := []string{show("stated", d.Stated), show("computed", d.Computed), show("fee", d.Fee),
		show("expected", d.Expected), show("difference", d.Difference)}
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
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
// amount, the local key's state and amount, formatted with money — and the statement line it is
// about (0: none, e.g. LOCAL_ONLY).
func findingSides(f reconcile.Finding) (channel, local string, line int64) {
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
		return "", "", 0
	}
	line = d.Line
	if line == 0 && len(d.Lines) > 1 {
		line = d.Lines[1] // DUPLICATE_IN_FILE: the repeated line
	}
	join := func(parts ...string) string {
		var out []string
		for _, p := range parts {
			if p != "" {
				out = append(out, p)
			}
		}
		return strings.Join(out, " · ")
	}
	amount := func(n *int64, currency string) string {
		if n == nil {
			return ""
		}
		return money.Display(*n, currency)
	}
	localCurrency := d.LocalCurrency
	if localCurrency == "" {
		localCurrency = d.Currency // AMOUNT_MISMATCH: both sides in the channel's currency
	}
	channel = join(d.ChannelStatus, amount(d.ChannelAmount, d.ChannelCurrency))
	if d.ChannelAmount == nil && d.ChannelCurrency != "" {
		channel = join(channel, d.ChannelCurrency)
	}
	local = join(d.LocalState, amount(d.LocalAmount, localCurrency))
	if d.LocalAmount == nil && d.LocalCurrency != "" {
		local = join(local, d.LocalCurrency) // CURRENCY_MISMATCH: the key's currency
	}
	return channel, local, line
}
