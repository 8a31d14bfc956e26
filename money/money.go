// Package money is the one currency table of idemops: ISO 4217 codes and their minor-unit
// exponents, exact parsing of decimal amounts into int64 minor units and exact formatting back.
// No floating point anywhere. Console, reconcile, paysim and the demo all use it; there is no
// other copy of the table.
package money

import (
	"strconv"
	"strings"

	"github.com/idemops/idemops/errs"
)

// exponents lists every active ISO 4217 currency whose minor unit is not two digits (ISO 4217
// list one, the "minor unit" column). Every other code in codes has exponent 2.
var exponents = map[string]int{
	// no minor unit
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// three digits
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// four digits
	"CLF": 4, "UYW": 4,
}

// codes are the active ISO 4217 currency codes (space separated); funds codes included, precious
// metals and testing codes (XAU, XTS, XXX …) excluded because nothing is charged in them.
const codes = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV " +
	"BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK " +
	"DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR " +
	"IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL " +
	"MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK " +
	"PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC " +
	"SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV " +
	"WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL"

var known = func() map[string]bool {
	m := make(map[string]bool)
	for _, c := range strings.Fields(codes) {
		m[c] = true
	}
	return m
}()

// Codes returns every currency code the table knows, in alphabetical order.
func Codes() []string { return strings.Fields(codes) }

// Exponent returns the number of minor-unit digits of an ISO 4217 code (upper case): 2 for CNY,
// USD, EUR and IDR, 0 for JPY and KRW, 3 for BHD and KWD. ok is false for unknown codes.
func Exponent(code string) (exp int, ok bool) {
	if !known[code] {
		return 0, false
	}
	if e, found := exponents[code]; found {
		return e, true
	}
	return 2, true
}

// Known reports whether code is an active ISO 4217 code (upper case).
func Known(code string) bool { return known[code] }

// Normalize upper-cases and trims a currency code and checks that ISO 4217 knows it.
func Normalize(s string) (string, error) {
	c := strings.ToUpper(strings.TrimSpace(s))
	if c == "" {
		return "", parseErr("empty currency")
	}
	if !known[c] {
		return "", parseErr("unknown currency %q", s)
	}
	return c, nil
}

// Parse converts a decimal amount in major units ("12.3", "-0.50") into exact minor units of
// currency (1230, -50 for CNY). An empty or malformed value, or one with more decimals than the
// currency has (other than trailing zeros), is an error.
func Parse(s, currency string) (int64, error) {
	exp, ok := Exponent(currency)
	if !ok {
		return 0, parseErr("unknown currency %q", currency)
	}
	return ParseScaled(s, exp, 0)
}

// ParseScaled reads an optionally signed decimal number and returns it scaled by 10^scale.
// Digits are required on both sides of a decimal point; fractional digits beyond scale must be
// zeros (the value stays exact); exponents, currency symbols and inner spaces are rejected.
// thousands, when not 0, is a grouping separator allowed between groups of three digits.
func ParseScaled(s string, scale int, thousands byte) (int64, error) {
	orig := s
	if s == "" {
		return 0, parseErr("empty amount")
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
		return 0, parseErr("malformed amount %q", orig)
	}
	if thousands != 0 && strings.IndexByte(intPart, thousands) >= 0 {
		var err error
		if intPart, err = ungroup(intPart, thousands); err != nil {
			return 0, parseErr("malformed amount %q: %v", orig, err)
		}
	}
	const limit = (1<<63 - 1) / 10
	var v int64
	for i := 0; i < len(intPart); i++ {
		c := intPart[i]
		if c < '0' || c > '9' {
			return 0, parseErr("malformed amount %q", orig)
		}
		if v > limit {
			return 0, parseErr("amount %q out of range", orig)
		}
		v = v*10 + int64(c-'0')
		if v < 0 {
			return 0, parseErr("amount %q out of range", orig)
		}
	}
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return 0, parseErr("malformed amount %q", orig)
		}
		if i >= scale && c != '0' {
			return 0, parseErr("amount %q has more than %d decimals", orig, scale)
		}
	}
	for i := 0; i < scale; i++ {
		d := int64(0)
		if i < len(frac) {
			d = int64(frac[i] - '0')
		}
		if v > limit {
			return 0, parseErr("amount %q out of range", orig)
		}
		v = v*10 + d
		if v < 0 {
			return 0, parseErr("amount %q out of range", orig)
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
		return "", parseErr("bad digit grouping")
	}
	for _, g := range groups[1:] {
		if len(g) != 3 {
			return "", parseErr("bad digit grouping")
		}
	}
	return strings.Join(groups, ""), nil
}

// Format renders minor units in major units with the currency's exponent, without the code:
// Format(-50, "CNY") is "-0.50", Format(500, "JPY") is "500", Format(12345, "IDR") is "123.45".
// Parse reads its output back exactly. An unknown currency is rendered as plain minor units.
func Format(minor int64, currency string) string {
	exp, ok := Exponent(currency)
	if !ok {
		return strconv.FormatInt(minor, 10)
	}
	return FormatScaled(minor, exp)
}

// Display renders an amount for people: "123.45 IDR", "500 JPY", "-0.05 EUR". An unknown currency
// is never guessed at: its minor units are shown as such, `42 minor units of "XX1"`.
func Display(minor int64, currency string) string {
	if _, ok := Exponent(currency); !ok {
		return strconv.FormatInt(minor, 10) + " minor units of " + strconv.Quote(currency)
	}
	return Format(minor, currency) + " " + currency
}

// Grouped is Format with the integer digits grouped by three for reading: Grouped(123456789,
// "CNY") is "1,234,567.89", Grouped(5000000, "KRW") is "5,000,000". An unknown currency's minor
// units are grouped as they are. Both languages of the console group this way; Parse does not
// read the separators back (ParseScaled does, given the separator).
func Grouped(minor int64, currency string) string {
	return Group(Format(minor, currency))
}

// Group puts thousands separators into a plain decimal as Format writes it ("-1234567.50" →
// "-1,234,567.50"); anything else is returned unchanged.
func Group(s string) string {
	sign, digits := "", s
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	intPart, frac, hasFrac := strings.Cut(digits, ".")
	if _, err := strconv.ParseUint(intPart, 10, 64); err != nil || len(intPart) <= 3 {
		return s
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasFrac {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}

// FormatScaled renders v / 10^scale exactly: FormatScaled(-5, 2) is "-0.05".
func FormatScaled(v int64, scale int) string {
	neg := v < 0
	// Work on the magnitude as uint64 so that the most negative int64 renders too.
	u := uint64(v)
	if neg {
		u = -u
	}
	digits := strconv.FormatUint(u, 10)
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
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

// ParseError is a currency or an amount that does not read. Its text is a phrase, so a console
// can show it inside a statement line's error in the operator's language.
type ParseError struct{ Why errs.Phrase }

func (e *ParseError) Error() string { return e.Why.String() }

// Phrasing is the error's text as a phrase.
func (e *ParseError) Phrasing() errs.Phrase { return e.Why }

func parseErr(format string, args ...any) error {
	return &ParseError{Why: errs.Phrasef(format, args...)}
}
