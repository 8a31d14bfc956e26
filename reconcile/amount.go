package reconcile

import (
	"errors"
	"fmt"
	"strings"
)

// currencyExponents lists every active ISO 4217 currency whose minor unit is not two digits.
// Every other code in iso4217Codes has exponent 2.
var currencyExponents = map[string]int{
	// no minor unit
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// three digits
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// four digits
	"CLF": 4, "UYW": 4,
}

// iso4217Codes are the active ISO 4217 codes (space separated) that statements may carry.
const iso4217Codes = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV " +
	"BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK " +
	"DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR " +
	"IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL " +
	"MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK " +
	"PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC " +
	"SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV " +
	"WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL"

var knownCurrencies = func() map[string]bool {
	m := make(map[string]bool)
	for _, c := range strings.Fields(iso4217Codes) {
		m[c] = true
	}
	return m
}()

// CurrencyExponent returns the number of minor-unit digits of an ISO 4217 code (upper case):
// 2 for CNY, USD and EUR, 0 for JPY and KRW, 3 for BHD and KWD. ok is false for unknown codes.
func CurrencyExponent(code string) (exp int, ok bool) {
	if !knownCurrencies[code] {
		return 0, false
	}
	if e, found := currencyExponents[code]; found {
		return e, true
	}
	return 2, true
}

// normalizeCurrency upper-cases a currency code and checks that ISO 4217 knows it.
func normalizeCurrency(s string) (string, error) {
	c := strings.ToUpper(strings.TrimSpace(s))
	if c == "" {
		return "", errors.New("empty currency")
	}
	if !knownCurrencies[c] {
		return "", fmt.Errorf("unknown currency %q", s)
	}
	return c, nil
}

// amountSyntax says which spellings of a number a format uses.
type amountSyntax struct {
	// thousands allows a grouping separator between digit groups of three ("1,234.56").
	thousands byte
}

// ParseAmount converts a decimal amount in major units ("12.3", "-0.50") into exact minor units
// of currency (1230, -50 for CNY). It never goes through floating point. An empty or malformed
// value, or one with more decimals than the currency has (other than trailing zeros), is an error.
func ParseAmount(s, currency string) (int64, error) {
	exp, ok := CurrencyExponent(currency)
	if !ok {
		return 0, fmt.Errorf("unknown currency %q", currency)
	}
	return parseDecimal(s, exp, amountSyntax{})
}

// parseDecimal reads an optionally signed decimal number and returns it scaled by 10^scale.
// Digits are required on both sides of a decimal point; fractional digits beyond scale must be
// zeros (the value stays exact); exponents, currency symbols and inner spaces are rejected.
func parseDecimal(s string, scale int, syn amountSyntax) (int64, error) {
	orig := s
	if s == "" {
		return 0, errors.New("empty amount")
	}
	neg := false
	switch s[0] {
	case '-':
		neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	intPart, frac, hasPoint := strings.Cut(s, ".")
	if intPart == "" || (hasPoint && frac == "") {
		return 0, fmt.Errorf("malformed amount %q", orig)
	}
	if syn.thousands != 0 && strings.IndexByte(intPart, syn.thousands) >= 0 {
		var err error
		if intPart, err = ungroup(intPart, syn.thousands); err != nil {
			return 0, fmt.Errorf("malformed amount %q: %v", orig, err)
		}
	}
	const limit = (1<<63 - 1) / 10
	var v int64
	for i := 0; i < len(intPart); i++ {
		c := intPart[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("malformed amount %q", orig)
		}
		if v > limit {
			return 0, fmt.Errorf("amount %q out of range", orig)
		}
		v = v*10 + int64(c-'0')
		if v < 0 {
			return 0, fmt.Errorf("amount %q out of range", orig)
		}
	}
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("malformed amount %q", orig)
		}
		if i >= scale && c != '0' {
			return 0, fmt.Errorf("amount %q has more than %d decimals", orig, scale)
		}
	}
	for i := 0; i < scale; i++ {
		d := int64(0)
		if i < len(frac) {
			d = int64(frac[i] - '0')
		}
		if v > limit {
			return 0, fmt.Errorf("amount %q out of range", orig)
		}
		v = v*10 + d
		if v < 0 {
			return 0, fmt.Errorf("amount %q out of range", orig)
		}
	}
	if neg {
		v = -v
	}
	return v, nil
}

// ungroup removes grouping separators, insisting on groups of exactly three digits.
func ungroup(s string, sep byte) (string, error) {
	groups := strings.Split(s, string(sep))
	if len(groups[0]) == 0 || len(groups[0]) > 3 {
		return "", errors.New("bad digit grouping")
	}
	for _, g := range groups[1:] {
		if len(g) != 3 {
			return "", errors.New("bad digit grouping")
		}
	}
	return strings.Join(groups, ""), nil
}

// FormatMinor renders minor units in major units with the currency's exponent: FormatMinor(-50,
// "CNY") is "-0.50", FormatMinor(500, "JPY") is "500". ParseAmount reads its output back exactly.
func FormatMinor(minor int64, currency string) string {
	exp, ok := CurrencyExponent(currency)
	if !ok {
		exp = 2
	}
	return formatScaled(minor, exp)
}

func formatScaled(v int64, scale int) string {
	neg := v < 0
	// Work on the magnitude as uint64 so that the most negative int64 renders too.
	u := uint64(v)
	if neg {
		u = -u
	}
	digits := fmt.Sprintf("%0*d", scale+1, u)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(digits[:len(digits)-scale])
	if scale > 0 {
		b.WriteByte('.')
		b.WriteString(digits[len(digits)-scale:])
	}
	return b.String()
}
