package claim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FingerprintVersion names the canonicalizer below. Stored beside every fingerprint, so that a
// future canonicalizer can recompute old fingerprints from the stored canonical request.
// Version 2 upper-cases the declared currency field, as the key's currency column always was
// ("cny" and "CNY" are one intent); a version-1 key is compared by recomputing its stored
// request under version 2.
const FingerprintVersion = 2

// MaxIntentBytes bounds a request intent before canonicalization.
const MaxIntentBytes = 1 << 20

// IntentSpec says which parts of an operation's request carry intent.
type IntentSpec struct {
	// Ignore lists fields that carry no intent (request time, trace id, client clock); dotted
	// paths reach into nested objects ("meta.trace_id").
	Ignore []string
	// Only, when set, keeps just these fields (dotted paths) and drops the rest.
	Only []string
	// AmountField and CurrencyField, when set, are copied to amount_minor and currency (the
	// amount must be an integer number of minor units).
	AmountField, CurrencyField string
	// Summary lists the fields (dotted paths) the operation declares non-sensitive: the console
	// shows them on the key page without the audited reveal step (amount, currency, payee, order
	// number). Fields not listed stay behind reveal. It has no part in the fingerprint.
	Summary []string
}

// intentWords are the words of field names that always carry intent: amount, currency, payee,
// items and quantities always count, so no operation may declare them ignored.
var intentWords = map[string]bool{"amount": true, "currency": true, "payee": true, "item": true, "items": true,
	"quantity": true, "quantities": true, "qty": true}

// carriesIntent says whether a field path names intent by its words (split at dots and
// underscores): "payee", "items.qty", "amount_minor".
func carriesIntent(path string) bool {
	for _, w := range strings.FieldsFunc(strings.ToLower(path), func(r rune) bool { return r == '.' || r == '_' }) {
		if intentWords[w] {
			return true
		}
	}
	return false
}

// covers says whether the path p is path or an object that holds it.
func covers(p, path string) bool { return p == path || strings.HasPrefix(path, p+".") }

// Check refuses a spec that would drop intent: an ignored field that carries intent (by its
// words, or because it is or holds the declared amount or currency field), or an Only list that
// does not keep the declared amount and currency fields. Operations files are checked with it
// at load (and a *FieldError names the entry).
func (s IntentSpec) Check() error {
	for i, p := range s.Ignore {
		if carriesIntent(p) || (s.AmountField != "" && covers(p, s.AmountField)) || (s.CurrencyField != "" && covers(p, s.CurrencyField)) {
			return fieldErr(ErrInvalidIntent, fmt.Sprintf("ignore[%d]", i),
				"%s carries intent (amount, currency, payee, items and quantities always count); it cannot be ignored", p)
		}
	}
	if len(s.Only) == 0 {
		return nil
	}
	for _, d := range []struct{ field, what string }{{s.AmountField, "amount"}, {s.CurrencyField, "currency"}} {
		kept := d.field == ""
		for _, p := range s.Only {
			kept = kept || covers(p, d.field)
		}
		if !kept {
			return fieldErr(ErrInvalidIntent, "only", "must keep %s, the declared %s field", d.field, d.what)
		}
	}
	return nil
}

// Intent is a request reduced to what carries intent, in canonical form.
type Intent struct {
	Canonical   []byte // canonical JSON
	Fingerprint string // hex SHA-256 of Canonical
	Version     int
	Amount      *int64
	Currency    string
	fields      map[string]any
}

// Canonicalize parses raw (a JSON object), drops the fields spec says carry no intent and
// renders the rest canonically: keys sorted, no insignificant whitespace, numbers in one
// decimal form (100, 100.0 and 1e2 are equal), strings NFC-normalized and trimmed.
func Canonicalize(raw []byte, spec IntentSpec) (*Intent, error) {
	if len(raw) > MaxIntentBytes {
		return nil, fieldErr(ErrInvalidIntent, "request", "is %d bytes, at most %d allowed", len(raw), MaxIntentBytes)
	}
	// encoding/json would replace invalid UTF-8 with U+FFFD, changing the intent silently.
	if !utf8.Valid(raw) {
		return nil, fieldErr(ErrInvalidIntent, "request", "is not valid UTF-8 (at byte %d)", invalidUTF8At(raw))
	}
	obj, ok := quickParse(raw)
	if !ok {
		var err error
		if obj, err = decodeIntent(raw); err != nil {
			return nil, err
		}
	}
	if len(spec.Only) > 0 {
		kept := map[string]any{}
		for _, p := range spec.Only {
			if val, ok := lookupPath(obj, p); ok {
				setPath(kept, p, val)
			}
		}
		obj = kept
	}
	for _, p := range spec.Ignore {
		deletePath(obj, p)
	}
	// Declared fields are normalised the way the key stores them: the currency upper-cased
	// (strings are already NFC-trimmed and numbers canonical, above).
	if spec.CurrencyField != "" {
		if v, ok := lookupPath(obj, spec.CurrencyField); ok {
			if s, ok := v.(string); ok {
				setPath(obj, spec.CurrencyField, strings.ToUpper(s))
			}
		}
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	writeCanonical(&buf, obj)
	sum := sha256.Sum256(buf.Bytes())
	in := &Intent{Canonical: buf.Bytes(), Fingerprint: hex.EncodeToString(sum[:]), Version: FingerprintVersion, fields: obj}
	if err := in.extract(spec); err != nil {
		return nil, err
	}
	return in, nil
}

// decodeIntent reads raw with encoding/json and normalizes it: the path for whatever quickParse
// declines, and the one that names what is wrong with an invalid request.
func decodeIntent(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fieldErr(ErrInvalidIntent, "request", "is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fieldErr(ErrInvalidIntent, "request", "has data after the JSON value")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fieldErr(ErrInvalidIntent, "request", "must be a JSON object")
	}
	norm, err := normalize(obj, "")
	if err != nil {
		return nil, err
	}
	return norm.(map[string]any), nil
}

func (in *Intent) extract(spec IntentSpec) error {
	if spec.AmountField != "" {
		v, ok := lookupPath(in.fields, spec.AmountField)
		n, isNum := v.(canonicalNumber)
		if !ok || !isNum {
			return fieldErr(ErrInvalidIntent, spec.AmountField, "must be an integer amount in minor units")
		}
		a, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return fieldErr(ErrInvalidIntent, spec.AmountField, "must be an integer amount in minor units, got %s", n)
		}
		in.Amount = &a
	}
	if spec.CurrencyField != "" {
		v, _ := lookupPath(in.fields, spec.CurrencyField)
		s, ok := v.(string)
		if !ok || len(s) != 3 {
			return fieldErr(ErrInvalidIntent, spec.CurrencyField, "must be a three-letter ISO 4217 code")
		}
		in.Currency = strings.ToUpper(s)
	}
	return nil
}

// canonicalNumber is a JSON number already in canonical decimal form.
type canonicalNumber string

// normalize turns strings into NFC-trimmed form and numbers into canonical ones, recursively.
func normalize(v any, path string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			nk := nfcTrim(k)
			if strings.ContainsRune(nk, 0) {
				return nil, fieldErr(ErrInvalidIntent, strings.TrimPrefix(path+"."+strings.ReplaceAll(nk, "\x00", `\u0000`), "."), "field names must not contain NUL (U+0000)")
			}
			n, err := normalize(val, path+"."+nk)
			if err != nil {
				return nil, err
			}
			out[nk] = n
		}
		return out, nil
	case []any:
		for i := range t {
			n, err := normalize(t[i], fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	case string:
		// PostgreSQL's jsonb refuses U+0000; a request carrying it is bad input, not a 500.
		if strings.ContainsRune(t, 0) {
			return nil, fieldErr(ErrInvalidIntent, strings.TrimPrefix(path, "."), "must not contain NUL (U+0000)")
		}
		return nfcTrim(t), nil
	case json.Number:
		n, err := canonicalDecimal(string(t))
		if err != nil {
			return nil, fieldErr(ErrInvalidIntent, strings.TrimPrefix(path, "."), "%v", err)
		}
		return n, nil
	default:
		return t, nil
	}
}

// canonicalDecimal renders a JSON number exactly, by moving its decimal point: no exponent, no
// leading or trailing zeros that carry no value, no "-0". Exponents are bounded so a tiny input
// cannot expand into a huge string. (json.Number has already passed the JSON number grammar.)
func canonicalDecimal(s string) (canonicalNumber, error) {
	neg := strings.HasPrefix(s, "-")
	mant, exp := strings.TrimPrefix(s, "-"), 0
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(mant[i+1:], "+"))
		if err != nil || e > 400 || e < -400 {
			return "", fmt.Errorf("number %q is out of range", s)
		}
		mant, exp = mant[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" || strings.Trim(intPart+frac, "0123456789") != "" {
		return "", fmt.Errorf("number %q does not parse", s)
	}
	digits := intPart + frac
	point := len(intPart) + exp // position of the decimal point within digits
	trimmed := strings.TrimLeft(digits, "0")
	point -= len(digits) - len(trimmed)
	digits = strings.TrimRight(trimmed, "0")
	if digits == "" {
		return "0", nil
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
	default:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	}
	return canonicalNumber(b.String()), nil
}

// nfcTrim trims and NFC-normalizes s; most intent strings are already normal (ASCII), which
// the quick check answers without allocating.
func nfcTrim(s string) string {
	s = strings.TrimSpace(s)
	if norm.NFC.IsNormalString(s) {
		return s
	}
	return norm.NFC.String(s)
}

func writeCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeCanonical(buf, t[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, e)
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, t)
	case canonicalNumber:
		buf.WriteString(string(t))
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
}

func writeString(buf *bytes.Buffer, s string) {
	// Most intent strings are plain ASCII: write them directly; anything needing an escape goes
	// through encoding/json (without HTML escaping), so the output is the same either way.
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		buf.WriteByte('"')
		buf.WriteString(s)
		buf.WriteByte('"')
		return
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

func lookupPath(obj map[string]any, path string) (any, bool) {
	var cur any = obj
	for rest, more := path, true; more; {
		var p string
		p, rest, more = strings.Cut(rest, ".")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func setPath(obj map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := obj[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[parts[len(parts)-1]] = v
}

func deletePath(obj map[string]any, path string) {
	for {
		p, rest, more := strings.Cut(path, ".")
		if !more {
			delete(obj, p)
			return
		}
		next, ok := obj[p].(map[string]any)
		if !ok {
			return
		}
		obj, path = next, rest
	}
}

// invalidUTF8At is the offset of the first byte of b that is not valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}
