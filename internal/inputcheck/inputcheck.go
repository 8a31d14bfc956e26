// Package inputcheck refuses text that is not text: a NUL byte (PostgreSQL cannot store one in
// text or jsonb, so it would surface as a 500) or bytes that are not UTF-8. Every HTTP entry
// point (the console's query, path and form values and JSON bodies, the demo payments API) and
// the CLI's flags run their input through it first, so hostile input is a 4xx or exit 2 naming
// the field, never an error from the database. ReadFile reads an operator's file (a cell map, an
// operations file) with a size limit, for the same reason.
package inputcheck

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemops/idemops/errs"
)

// refuse is the error of a refused field: an *errs.FieldError ("field: reason", kind invalid).
func refuse(field, reason string) error { return errs.Field(field, errs.Verbatim(reason)) }

// Problem says what is wrong with s, or "" when nothing is.
func Problem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// Name makes a field name safe to show in an error: quoted when it is not clean text itself,
// and at most 64 bytes.
func Name(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	if Problem(s) != "" || s == "" {
		return strconv.QuoteToASCII(s)
	}
	return s
}

// Text checks one value of the named field.
func Text(field, s string) error {
	if p := Problem(s); p != "" {
		return refuse(Name(field), p)
	}
	return nil
}

// Values checks every name and value of a query string or a form, in a stable order.
func Values(v map[string][]string) error {
	names := make([]string, 0, len(v))
	for k := range v {
		names = append(names, k)
	}
	slices.Sort(names) // so the same request always names the same field
	for _, k := range names {
		if p := Problem(k); p != "" {
			return refuse(Name(k), "its name "+p)
		}
		for _, s := range v[k] {
			if err := Text(k, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// JSON checks every string and member name of the JSON text raw, naming the first bad one by
// its path (payee, items[2].name). Syntax errors are left to the caller's decoder, which
// reports them in its own words.
func JSON(raw []byte) error {
	type frame struct {
		object  bool
		key     string // the member being read (objects)
		index   int    // the element being read (arrays)
		wantKey bool
	}
	var stack []frame
	path := func(last string) string {
		var b strings.Builder
		for i, f := range stack {
			switch {
			case f.object && i == len(stack)-1 && last != "":
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(last)
			case f.object:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			default:
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		if b.Len() == 0 {
			return "body"
		}
		return Name(b.String())
	}
	done := func() { // a value ended: the enclosing container moves on
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var from int64
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF, or a syntax error the caller's decoder reports
			return nil
		}
		to := dec.InputOffset()
		span := raw[from:to] // the token's text, with the separators before it
		from = to
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			n := len(stack)
			if n > 0 && stack[n-1].object && stack[n-1].wantKey {
				if p := stringProblem(t, span); p != "" {
					return refuse(path(t), "a member name "+p)
				}
				stack[n-1].key, stack[n-1].wantKey = t, false
				continue
			}
			if p := stringProblem(t, span); p != "" {
				return refuse(path(""), p)
			}
			done()
		default:
			done()
		}
	}
}

// stringProblem checks a decoded JSON string against the raw text it came from: the decoder
// turns bytes that are not UTF-8, and \u escapes of unpaired surrogates, into U+FFFD silently.
func stringProblem(s string, span []byte) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	if !utf8.Valid(span) {
		return "is not valid UTF-8"
	}
	if strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(span, []byte("\uFFFD")) &&
		!bytes.Contains(bytes.ToLower(span), []byte(`\ufffd`)) {
		return "is not valid UTF-8 (an unpaired surrogate escape)"
	}
	return ""
}
