package reconcile

import (
	"math"
	"strings"
	"testing"
)

func TestParseAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		currency string
		want     int64
		wantErr  string // substring; "" means success
	}{
		{"12.3", "CNY", 1230, ""},
		{"12.30", "CNY", 1230, ""},
		{"-0.50", "CNY", -50, ""},
		{"+7", "USD", 700, ""},
		{"0", "EUR", 0, ""},
		{"0.01", "USD", 1, ""},
		{"1234.56", "CNY", 123456, ""},
		{"500", "JPY", 500, ""},
		{"-1200", "KRW", -1200, ""},
		{"1.234", "BHD", 1234, ""},
		{"0.5", "KWD", 500, ""},
		{"1.2345", "CLF", 12345, ""},
		{"12.300", "CNY", 1230, ""}, // trailing zeros beyond the exponent keep the value exact
		{"500.00", "JPY", 500, ""},
		{"92233720368547758.07", "USD", math.MaxInt64, ""},
		{"-92233720368547758.07", "USD", -math.MaxInt64, ""},

		{"12.345", "CNY", 0, "more than 2 decimals"},
		{"500.5", "JPY", 0, "more than 0 decimals"},
		{"1.2345", "BHD", 0, "more than 3 decimals"},
		{"", "CNY", 0, "empty amount"},
		{"-", "CNY", 0, "malformed"},
		{".5", "CNY", 0, "malformed"},
		{"5.", "CNY", 0, "malformed"},
		{"1,234.56", "CNY", 0, "malformed"}, // grouping only where a format uses it
		{"12.3.4", "CNY", 0, "malformed"},
		{"1e3", "CNY", 0, "malformed"},
		{"¥12", "CNY", 0, "malformed"},
		{"12 ", "CNY", 0, "malformed"},
		{"--1", "CNY", 0, "malformed"},
		{"abc", "CNY", 0, "malformed"},
		{"NaN", "USD", 0, "malformed"},
		{"92233720368547758.08", "USD", 0, "out of range"},
		{"99999999999999999999", "JPY", 0, "out of range"},
		{"1.00", "XXY", 0, "unknown currency"},
	}
	for _, tt := range tests {
		t.Run(tt.currency+"/"+tt.in, func(t *testing.T) {
			got, err := ParseAmount(tt.in, tt.currency)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAmount(%q, %s) = %d, %v; want error containing %q", tt.in, tt.currency, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseAmount(%q, %s) = %d, %v; want %d", tt.in, tt.currency, got, err, tt.want)
			}
		})
	}
}

func TestParseDecimal_ThousandsSeparatorWhereTheFormatUsesIt(t *testing.T) {
	t.Parallel()
	syn := amountSyntax{thousands: ','}
	for in, want := range map[string]int64{"1,234.56": 123456, "-1,234,567.00": -123456700, "999.99": 99999, "12": 1200} {
		if got, err := parseDecimal(in, 2, syn); err != nil || got != want {
			t.Errorf("parseDecimal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1,23.00", "12,34", ",123", "1,,234", "1234,567", "1,234,56"} {
		if got, err := parseDecimal(in, 2, syn); err == nil {
			t.Errorf("parseDecimal(%q) = %d; want a grouping error", in, got)
		}
	}
}

func TestFormatMinor_RoundTripsThroughParseAmount(t *testing.T) {
	t.Parallel()
	for _, cur := range []string{"CNY", "JPY", "BHD", "CLF"} {
		for _, v := range []int64{0, 1, -1, 9, 10, 99, 100, -50, 123456789, math.MaxInt64, -math.MaxInt64} {
			s := FormatMinor(v, cur)
			back, err := ParseAmount(s, cur)
			if err != nil || back != v {
				t.Errorf("%s %d: FormatMinor = %q, ParseAmount = %d, %v", cur, v, s, back, err)
			}
		}
	}
	if got := FormatMinor(-50, "CNY"); got != "-0.50" {
		t.Errorf("FormatMinor(-50, CNY) = %q", got)
	}
	if got := FormatMinor(500, "JPY"); got != "500" {
		t.Errorf("FormatMinor(500, JPY) = %q", got)
	}
	if got := FormatMinor(math.MinInt64, "USD"); got != "-92233720368547758.08" {
		t.Errorf("FormatMinor(MinInt64, USD) = %q", got)
	}
}

func TestCurrencyExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"CNY": 2, "USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3, "TND": 3} {
		if got, ok := CurrencyExponent(code); !ok || got != want {
			t.Errorf("CurrencyExponent(%s) = %d, %v; want %d", code, got, ok, want)
		}
	}
	for _, code := range []string{"", "cny", "XXY", "RMB"} {
		if _, ok := CurrencyExponent(code); ok {
			t.Errorf("CurrencyExponent(%q) is known", code)
		}
	}
}
