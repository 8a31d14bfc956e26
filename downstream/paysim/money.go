package paysim

import (
	"strconv"
	"strings"
)

// exponents are the minor-unit exponents of the currencies paysim accepts.
var exponents = map[string]int{
	"CNY": 2, "USD": 2, "EUR": 2, "GBP": 2, "HKD": 2, "SGD": 2, "AUD": 2, "CAD": 2,
	"JPY": 0, "KRW": 0,
	"BHD": 3, "KWD": 3,
}

// maxAmountMinor bounds a charge so that fee arithmetic (amount × basis points) cannot overflow.
const maxAmountMinor = 1_000_000_000_000

// currencyExponent says how many minor-unit digits a currency has, and whether paysim knows it.
func currencyExponent(currency string) (int, bool) {
	e, ok := exponents[currency]
	return e, ok
}

// formatMinor renders minor units exactly as a decimal in major units: 12345 CNY → "123.45",
// -5 CNY → "-0.05", 1000 JPY → "1000". No floating point anywhere.
func formatMinor(minor int64, currency string) string {
	exp, _ := currencyExponent(currency)
	neg := minor < 0
	u := uint64(minor)
	if neg {
		u = uint64(-(minor + 1)) + 1 // exact even for math.MinInt64
	}
	digits := strconv.FormatUint(u, 10)
	if exp > 0 {
		if len(digits) <= exp {
			digits = strings.Repeat("0", exp-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-exp] + "." + digits[len(digits)-exp:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// feeMinor is the channel's fee on an amount: bps basis points, rounded half up.
func feeMinor(amount int64, bps int) int64 {
	if amount <= 0 || bps <= 0 {
		return 0
	}
	return (amount*int64(bps) + 5000) / 10000
}

// formatRate renders basis points as a percentage with two decimals: 60 → "0.60%".
func formatRate(bps int) string {
	return formatMinor(int64(bps), "CNY") + "%"
}

func itoa(n int) string { return strconv.Itoa(n) }
