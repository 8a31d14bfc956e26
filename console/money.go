package console

import (
	"strconv"
	"strings"

	"golang.org/x/text/currency"
)

// FormatAmount renders minor units exactly in major units with the currency's ISO 4217
// exponent (CLDR's standard digits): 1234 CNY → "12.34 CNY", 1000 JPY → "1000 JPY", 12345 BHD
// → "12.345 BHD". Integer arithmetic only. An unknown currency shows the minor units as such.
func FormatAmount(minor int64, cur string) string {
	unit, err := currency.ParseISO(cur)
	if err != nil {
		return strconv.FormatInt(minor, 10) + " minor units of " + strconv.Quote(cur)
	}
	scale, _ := currency.Standard.Rounding(unit)
	neg := minor < 0
	u := uint64(minor)
	if neg {
		u = uint64(-(minor + 1)) + 1 // exact even for the smallest int64
	}
	digits := strconv.FormatUint(u, 10)
	if scale > 0 {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		digits = "-" + digits
	}
	return digits + " " + unit.String()
}
