package paysim

import (
	"strconv"

	"github.com/idemops/idemops/money"
)

// MaxAmountMinor bounds a charge or refund so that fee arithmetic (amount × basis points) cannot
// overflow: a service validating its own requests refuses larger amounts before it claims.
const MaxAmountMinor = 1_000_000_000_000

const maxAmountMinor = MaxAmountMinor

// currencyExponent says how many minor-unit digits a currency has, and whether paysim settles it:
// every active ISO 4217 currency of the money package's one table.
func currencyExponent(currency string) (int, bool) { return money.Exponent(currency) }

// formatMinor renders minor units exactly as a decimal in major units: 12345 CNY → "123.45",
// -5 CNY → "-0.05", 1000 JPY → "1000", 12345 IDR → "123.45".
func formatMinor(minor int64, currency string) string { return money.Format(minor, currency) }

// feeMinor is the channel's fee on an amount: bps basis points, rounded half up.
func feeMinor(amount int64, bps int) int64 {
	if amount <= 0 || bps <= 0 {
		return 0
	}
	return (amount*int64(bps) + 5000) / 10000
}

// formatRate renders basis points as a percentage with two decimals: 60 → "0.60%".
func formatRate(bps int) string {
	return money.FormatScaled(int64(bps), 2) + "%"
}

func itoa(n int) string { return strconv.Itoa(n) }
