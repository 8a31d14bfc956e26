package console

import (
	"math"
	"testing"
)

func TestFormatAmount_UsesTheCurrencyExponentExactly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor int64
		cur   string
		want  string
	}{
		{1234, "CNY", "12.34 CNY"},
		{5, "USD", "0.05 USD"},
		{-5, "EUR", "-0.05 EUR"},
		{100000, "CNY", "1000.00 CNY"},
		{1000, "JPY", "1000 JPY"},
		{12345, "BHD", "12.345 BHD"},
		{0, "KRW", "0 KRW"},
		{math.MinInt64, "USD", "-92233720368547758.08 USD"},
		{42, "XX1", `42 minor units of "XX1"`},
	} {
		if got := FormatAmount(tc.minor, tc.cur); got != tc.want {
			t.Errorf("FormatAmount(%d, %s) = %q, want %q", tc.minor, tc.cur, got, tc.want)
		}
	}
}
