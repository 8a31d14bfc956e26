package money

import (
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
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
		{"123.45", "IDR", 12345, ""},
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
		{"105.0.0", "CNY", 0, "malformed"},
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
			got, err := Parse(tt.in, tt.currency)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q, %s) = %d, %v; want error containing %q", tt.in, tt.currency, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q, %s) = %d, %v; want %d", tt.in, tt.currency, got, err, tt.want)
			}
		})
	}
}

func TestParseScaled_ThousandsSeparatorWhereTheFormatUsesIt(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1,234.56": 123456, "-1,234,567.00": -123456700, "999.99": 99999, "12": 1200} {
		if got, err := ParseScaled(in, 2, ','); err != nil || got != want {
			t.Errorf("ParseScaled(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1,23.00", "12,34", ",123", "1,,234", "1234,567", "1,234,56"} {
		if got, err := ParseScaled(in, 2, ','); err == nil {
			t.Errorf("ParseScaled(%q) = %d; want a grouping error", in, got)
		}
	}
}

// The examples: the exponent is ISO 4217's minor unit, so IDR, COP, PKR … have two
// decimals even where CLDR displays none.
func TestFormat_UsesTheISO4217Exponent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor         int64
		cur           string
		want, display string
	}{
		{12345, "IDR", "123.45", "123.45 IDR"},
		{12345, "COP", "123.45", "123.45 COP"},
		{12345, "IQD", "12.345", "12.345 IQD"},
		{500, "JPY", "500", "500 JPY"},
		{12345, "BHD", "12.345", "12.345 BHD"},
		{1234, "CNY", "12.34", "12.34 CNY"},
		{-1234, "CNY", "-12.34", "-12.34 CNY"},
		{-5, "EUR", "-0.05", "-0.05 EUR"},
		{0, "KRW", "0", "0 KRW"},
		{12345, "CLF", "1.2345", "1.2345 CLF"},
		{math.MinInt64, "USD", "-92233720368547758.08", "-92233720368547758.08 USD"},
		{42, "XX1", "42", `42 minor units of "XX1"`},
	} {
		if got := Format(tc.minor, tc.cur); got != tc.want {
			t.Errorf("Format(%d, %s) = %q, want %q", tc.minor, tc.cur, got, tc.want)
		}
		if got := Display(tc.minor, tc.cur); got != tc.display {
			t.Errorf("Display(%d, %s) = %q, want %q", tc.minor, tc.cur, got, tc.display)
		}
	}
}

func TestFormat_RoundTripsThroughParse(t *testing.T) {
	t.Parallel()
	for _, cur := range Codes() {
		for _, v := range []int64{0, 1, -1, 9, 10, 99, 100, -50, 123456789, math.MaxInt64, -math.MaxInt64} {
			s := Format(v, cur)
			back, err := Parse(s, cur)
			if err != nil || back != v {
				t.Errorf("%s %d: Format = %q, Parse = %d, %v", cur, v, s, back, err)
			}
		}
	}
}

func TestExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"CNY": 2, "USD": 2, "EUR": 2, "IDR": 2, "PKR": 2, "TZS": 2, "JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3, "TND": 3, "IQD": 3} {
		if got, ok := Exponent(code); !ok || got != want {
			t.Errorf("Exponent(%s) = %d, %v; want %d", code, got, ok, want)
		}
	}
	for _, code := range []string{"", "cny", "XXY", "RMB", "XAU", "XTS"} {
		if _, ok := Exponent(code); ok {
			t.Errorf("Exponent(%q) is known", code)
		}
	}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	if c, err := Normalize(" idr "); err != nil || c != "IDR" {
		t.Errorf("Normalize(idr) = %q, %v", c, err)
	}
	for _, in := range []string{"", "RMB", "us"} {
		if _, err := Normalize(in); err == nil {
			t.Errorf("Normalize(%q) accepted", in)
		}
	}
}

// FuzzParse: an accepted amount formats back to a value that parses to the same minor units.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"12.3", "-0.50", "1,234.56", "0", "92233720368547758.07", "1.000", "+5"} {
		f.Add(s, "CNY")
		f.Add(s, "JPY")
		f.Add(s, "BHD")
	}
	f.Fuzz(func(t *testing.T, s, currency string) {
		v, err := Parse(s, currency)
		if err != nil {
			return
		}
		if back, err := Parse(Format(v, currency), currency); err != nil || back != v {
			t.Fatalf("%q %s: %d formats as %q, back %d, %v", s, currency, v, Format(v, currency), back, err)
		}
	})
}

func TestGrouped_GroupsTheIntegerDigitsByThree(t *testing.T) {
	for _, c := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{123456789, "CNY", "1,234,567.89"},
		{5000000, "KRW", "5,000,000"},
		{50000, "KRW", "50,000"},
		{-123456, "EUR", "-1,234.56"},
		{999, "USD", "9.99"},
		{100000, "USD", "1,000.00"},
		{1234567, "BHD", "1,234.567"},
		{1234567, "XX1", "1,234,567"},
		{-9223372036854775808, "JPY", "-9,223,372,036,854,775,808"},
	} {
		if got := Grouped(c.minor, c.currency); got != c.want {
			t.Errorf("Grouped(%d, %s) = %q, want %q", c.minor, c.currency, got, c.want)
		}
	}
	if got := Group("12 CNY"); got != "12 CNY" {
		t.Errorf("Group of a non-number = %q", got)
	}
}
