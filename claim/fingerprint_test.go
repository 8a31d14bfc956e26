package claim_test

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim"
)

func TestFingerprint_CanonicalForm(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
		spec           claim.IntentSpec
	}{
		{"sorted keys, no whitespace", `{ "b": 1, "a": 2 }`, `{"a":2,"b":1}`, claim.IntentSpec{}},
		{"numbers in one decimal form", `{"a":100,"b":100.0,"c":1e2,"d":1.50,"e":-0,"f":0.000,"g":12345678901234567890123}`,
			`{"a":100,"b":100,"c":100,"d":1.5,"e":0,"f":0,"g":12345678901234567890123}`, claim.IntentSpec{}},
		{"small exponents", `{"a":1.5e-3,"b":25E-1}`, `{"a":0.0015,"b":2.5}`, claim.IntentSpec{}},
		{"strings NFC and trimmed", "{\"n\":\"  Cafe\u0301 \"}", "{\"n\":\"Caf\u00e9\"}", claim.IntentSpec{}},
		{"no HTML escaping", `{"s":"<a&b>"}`, `{"s":"<a&b>"}`, claim.IntentSpec{}},
		{"nested and arrays keep order", `{"items":[{"q":2,"sku":"x"},{"sku":"a","q":1}]}`, `{"items":[{"q":2,"sku":"x"},{"q":1,"sku":"a"}]}`, claim.IntentSpec{}},
		{"ignored fields dropped", `{"amount":1,"trace_id":"t","meta":{"client_ts":"x","channel":"app"}}`, `{"amount":1,"meta":{"channel":"app"}}`,
			claim.IntentSpec{Ignore: []string{"trace_id", "meta.client_ts"}}},
		{"only listed fields kept", `{"amount":1,"currency":"CNY","note":"n"}`, `{"amount":1,"currency":"CNY"}`,
			claim.IntentSpec{Only: []string{"amount", "currency"}}},
		{"booleans and null", `{"a":true,"b":null}`, `{"a":true,"b":null}`, claim.IntentSpec{}},
	}
	for _, c := range cases {
		in, err := claim.Canonicalize([]byte(c.in), c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(in.Canonical) != c.want {
			t.Errorf("%s: got %s want %s", c.name, in.Canonical, c.want)
		}
		if in.Version != claim.FingerprintVersion || len(in.Fingerprint) != 64 {
			t.Errorf("%s: version %d fingerprint %q", c.name, in.Version, in.Fingerprint)
		}
	}
}

func TestFingerprint_IntentFieldsAlwaysCount(t *testing.T) {
	t.Parallel()
	spec := claim.IntentSpec{Ignore: []string{"description", "client_ts"}}
	base := `{"amount_minor":100,"currency":"CNY","payee":"p","items":[{"sku":"a","qty":1}]}`
	changed := []string{
		`{"amount_minor":101,"currency":"CNY","payee":"p","items":[{"sku":"a","qty":1}]}`,
		`{"amount_minor":100,"currency":"USD","payee":"p","items":[{"sku":"a","qty":1}]}`,
		`{"amount_minor":100,"currency":"CNY","payee":"q","items":[{"sku":"a","qty":1}]}`,
		`{"amount_minor":100,"currency":"CNY","payee":"p","items":[{"sku":"a","qty":2}]}`,
		`{"amount_minor":100,"currency":"CNY","payee":"p","items":[{"sku":"b","qty":1}]}`,
	}
	b, _ := claim.Canonicalize([]byte(base), spec)
	for _, c := range changed {
		o, _ := claim.Canonicalize([]byte(c), spec)
		if o.Fingerprint == b.Fingerprint {
			t.Errorf("%s has the fingerprint of %s", c, base)
		}
	}
}

func TestFingerprint_RejectsWhatItCannotCanonicalize(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `{`, `"s"`, `{"a":1e999999}`, `{"a":1}x`} {
		if _, err := claim.Canonicalize([]byte(in), claim.IntentSpec{}); !errors.Is(err, claim.ErrInvalidIntent) {
			t.Errorf("%q: err = %v", in, err)
		}
	}
}

// NUL and invalid UTF-8 are refused with the field that holds them (PostgreSQL's jsonb refuses
// U+0000, and encoding/json would silently turn invalid UTF-8 into U+FFFD).
func TestFingerprint_RefusesNULAndInvalidUTF8NamingTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"payee":"ali\u0000ce"}`, "payee: must not contain NUL (U+0000)"},
		{`{"meta":{"tags":["a","b\u0000"]}}`, "meta.tags[1]: must not contain NUL (U+0000)"},
		{`{"a\u0000b":1}`, `a\u0000b: field names must not contain NUL (U+0000)`},
		{"{\"payee\":\"caf\xe9\"}", "request: is not valid UTF-8 (at byte 13)"},
	} {
		_, err := claim.Canonicalize([]byte(tc.in), claim.IntentSpec{})
		if !errors.Is(err, claim.ErrInvalidIntent) || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// FuzzCanonicalize: canonicalization is idempotent (equal intents ⇒ equal fingerprints, also
// after a round-trip through the stored canonical form), insensitive to whitespace and key
// order, and any change of an intent value changes the fingerprint.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"amount":100.0,"currency":"CNY"}`, `{"x":[1,"b",{"c":null}],"y":true}`, `{"n":"Cafe\u0301"}`, `{"e":1e2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		in, err := claim.Canonicalize([]byte(raw), claim.IntentSpec{})
		if err != nil {
			return
		}
		again, err := claim.Canonicalize(in.Canonical, claim.IntentSpec{})
		if err != nil || again.Fingerprint != in.Fingerprint {
			t.Fatalf("canonical form %s does not re-canonicalize to itself: %v", in.Canonical, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(in.Canonical, &obj); err != nil {
			t.Fatalf("canonical form is not JSON: %s", in.Canonical)
		}
		// Re-encode with Go's (different) key order and spacing: same fingerprint.
		pretty, _ := json.MarshalIndent(obj, " ", "  ")
		if p, err := claim.Canonicalize(pretty, claim.IntentSpec{}); err == nil && p.Fingerprint != in.Fingerprint {
			// float64 round-trips may lose digits of long numbers; only compare when exact.
			if string(p.Canonical) != string(in.Canonical) && !hasLongNumber(in.Canonical) {
				t.Fatalf("whitespace/order changed the fingerprint: %s vs %s", p.Canonical, in.Canonical)
			}
		}
		// Changing one intent value changes the fingerprint.
		probe := "x"
		if obj["__probe"] == "x" {
			probe = "y"
		}
		obj["__probe"] = probe
		changed, _ := json.Marshal(obj)
		if c, err := claim.Canonicalize(changed, claim.IntentSpec{}); err == nil && c.Fingerprint == in.Fingerprint {
			t.Fatalf("added field did not change the fingerprint of %s", in.Canonical)
		}
	})
}

func hasLongNumber(b []byte) bool {
	digits := 0
	for _, c := range b {
		if c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '-' {
			digits++
			if digits > 15 {
				return true
			}
		} else {
			digits = 0
		}
	}
	return false
}

// FuzzCanonicalNumber: a canonical number has exactly the value of the number it came from.
func FuzzCanonicalNumber(f *testing.F) {
	for _, s := range []string{"0", "-0.0", "100", "1e2", "1.50", "0.00012", "-12.3400e-3", "123456789012345678901234567890", "9.99E+20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, num string) {
		in, err := claim.Canonicalize([]byte(`{"n":`+num+`}`), claim.IntentSpec{})
		if err != nil {
			return
		}
		dec := json.NewDecoder(strings.NewReader(string(in.Canonical)))
		dec.UseNumber()
		var out map[string]any
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("%s: %v", in.Canonical, err)
		}
		n, isNumber := out["n"].(json.Number)
		if !isNumber {
			return // the fuzzer wrote another JSON value
		}
		want, ok1 := new(big.Rat).SetString(strings.TrimSpace(num))
		got, ok2 := new(big.Rat).SetString(string(n))
		if !ok1 || !ok2 || want.Cmp(got) != 0 {
			t.Fatalf("%q became %q", num, n)
		}
		if strings.ContainsAny(string(n), "eE+") || string(n) == "-0" {
			t.Fatalf("%q is not canonical: %q", num, n)
		}
	})
}
