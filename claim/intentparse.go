package claim

import (
	"strings"
	"unicode/utf8"
)

// quickParse reads a JSON object into the normalized tree Canonicalize works on (maps, slices,
// NFC-trimmed strings, canonical numbers, bools, nil) in one pass, without encoding/json's
// reflection and without a second walk to normalize. It declines (false) whatever it does not
// read the common way — any syntax error, a surrogate escape, a NUL, a field name that repeats
// (after normalization), nesting deeper than quickMaxDepth, a number canonicalDecimal refuses —
// and Canonicalize then takes the encoding/json path, which also names the error. Every input it
// accepts, that path reads to the same tree (TestQuickParse_MatchesDecoder, FuzzQuickParse).
func quickParse(b []byte) (map[string]any, bool) {
	p := intentParser{b: b}
	p.space()
	if p.i >= len(b) || b[p.i] != '{' {
		return nil, false
	}
	obj, ok := p.object()
	if !ok {
		return nil, false
	}
	p.space()
	return obj, p.i == len(b)
}

// quickMaxDepth bounds the parser's recursion; deeper documents go to encoding/json, which has
// its own bound.
const quickMaxDepth = 64

type intentParser struct {
	b     []byte
	i     int
	depth int
}

func (p *intentParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *intentParser) value() (any, bool) {
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		obj, ok := p.object()
		if !ok {
			return nil, false
		}
		return obj, true
	case c == '[':
		return p.array()
	case c == '"':
		s, ok := p.str()
		if !ok || strings.IndexByte(s, 0) >= 0 {
			return nil, false
		}
		return nfcTrim(s), true
	case c == 't':
		return true, p.word("true")
	case c == 'f':
		return false, p.word("false")
	case c == 'n':
		return nil, p.word("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return nil, false
}

func (p *intentParser) word(w string) bool {
	if len(p.b)-p.i < len(w) || string(p.b[p.i:p.i+len(w)]) != w {
		return false
	}
	p.i += len(w)
	return true
}

func (p *intentParser) object() (map[string]any, bool) {
	obj := map[string]any{}
	ok := p.elements('}', func() bool {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		k, ok := p.str()
		if !ok {
			return false
		}
		k = nfcTrim(k)
		if _, dup := obj[k]; dup || strings.IndexByte(k, 0) >= 0 {
			return false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		v, ok := p.value()
		obj[k] = v
		return ok
	})
	return obj, ok
}

func (p *intentParser) array() (any, bool) {
	arr := []any{} // encoding/json's empty array is empty, not nil
	ok := p.elements(']', func() bool {
		v, ok := p.value()
		arr = append(arr, v)
		return ok
	})
	return arr, ok
}

// elements reads the comma-separated elements of an object or array whose opening byte is at
// p.i, up to its closing byte; each reads one element, starting at its first non-space byte.
func (p *intentParser) elements(closing byte, each func() bool) bool {
	if p.depth++; p.depth > quickMaxDepth {
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		p.depth--
		return true
	}
	for {
		p.space()
		if !each() {
			return false
		}
		p.space()
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case closing:
			p.i++
			p.depth--
			return true
		default:
			return false
		}
	}
}

// number reads a number by the JSON grammar and renders it canonically.
func (p *intentParser) number() (any, bool) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return nil, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	n, err := canonicalDecimal(string(p.b[start:p.i]))
	if err != nil {
		return nil, false
	}
	return n, true
}

func (p *intentParser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// str reads a string at p.i (a '"'); the input is valid UTF-8 (Canonicalize checked).
func (p *intentParser) str() (string, bool) {
	p.i++
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return string(p.b[start : p.i-1]), true
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

func (p *intentParser) escapedStr(start int) (string, bool) {
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		switch e := p.b[p.i+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(p.b[p.i+2:])
			if !ok || r >= 0xD800 && r <= 0xDFFF { // surrogates: encoding/json's pairing rules
				return "", false
			}
			buf = utf8.AppendRune(buf, r)
			p.i += 4
		default:
			return "", false
		}
		p.i += 2
	}
	return "", false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
