package claim

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// sameAsDecoder fails t when quickParse accepts raw but encoding/json's path refuses it or reads
// another tree. It reports whether quickParse accepted raw.
func sameAsDecoder(t *testing.T, raw []byte) bool {
	t.Helper()
	if !utf8.Valid(raw) { // Canonicalize refuses it before either parser runs
		return false
	}
	quick, ok := quickParse(raw)
	slow, err := decodeIntent(raw)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("quickParse accepted %q, which encoding/json refuses: %v", raw, err)
	}
	if !reflect.DeepEqual(quick, slow) {
		t.Fatalf("%q: quickParse read %#v, encoding/json %#v", raw, quick, slow)
	}
	return true
}

func TestQuickParse_MatchesDecoder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in    string
		quick bool // taken by the fast path (else declined, for encoding/json to read or refuse)
	}{
		{`{"amount_minor":1234,"currency":"CNY","payee":"alice","description":"book"}`, true},
		{" \t\r\n{ \"b\" : [ 1 , -0.50 , 1E+2 , 0e-3 , true , false , null , { } , [ ] ] } \n", true},
		{`{"s":"caf\u00e9 \"q\" \\ \/ \b\f\n\r\t","k\u0041":"Cafe\u0301","  pad  ":"  x  "}`, true},
		{`{"n":{"m":{"o":[[[{"deep":-12.340e-2}]]]}}}`, true},
		{`{"big":123456789012345678901234567890,"tiny":1e-401}`, false}, // exponent out of range
		{`{"a":1,"a":2}`, false},        // repeated name
		{`{"a":1," a":2}`, false},       // repeated after trimming
		{`{"s":"\ud83d\ude00"}`, false}, // surrogate pair
		{`{"s":"\ud800"}`, false},       // lone surrogate
		{`{"s":"a\u0000b"}`, false},     // NUL
		{`{"a\u0000":1}`, false},
		{`{"a":01}`, false}, {`{"a":1.}`, false}, {`{"a":.5}`, false}, {`{"a":-}`, false}, {`{"a":1e}`, false},
		{`{"a":+1}`, false}, {`{"a":0x10}`, false}, {`{"a":NaN}`, false}, {`{"a":tru}`, false}, {`{"a":truex}`, false},
		{`{"a":nul}`, false}, {`{"a":"\x"}`, false}, {`{"a":"\u12"}`, false}, {`{"a":"\u12G4"}`, false},
		{"{\"a\":\"tab\there\"}", false}, {`{"a":1,}`, false}, {`{,"a":1}`, false}, {`{"a" 1}`, false},
		{`{"a":[1,]}`, false}, {`{"a":[1 2]}`, false}, {`{a:1}`, false}, {`{'a':1}`, false},
		{`{"a":1}{}`, false}, {`{"a":1} x`, false}, {`[1]`, false}, {`"s"`, false}, {`1`, false}, {``, false},
		{`{"a":1`, false}, {`{"a":"unterminated}`, false}, {"\xef\xbb\xbf{}", false}, {`{"a":1}` + "\x00", false},
		{`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, false}, // deeper than quickMaxDepth
		{`{"a":"\u00E9\u00e9"}`, true}, {`{"":""}`, true}, {`{}`, true},
	}
	for _, c := range cases {
		if got := sameAsDecoder(t, []byte(c.in)); got != c.quick {
			t.Errorf("%q: fast path took it %v, want %v", c.in, got, c.quick)
		}
	}
}

// TestQuickParse_RandomDocuments compares both parsers on generated documents (escapes, number
// forms, whitespace, nesting) and on each document with one byte cut, doubled or replaced.
func TestQuickParse_RandomDocuments(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	taken := 0
	for n := 0; n < 3000; n++ {
		var b strings.Builder
		genObject(r, &b, 0)
		doc := []byte(b.String())
		if sameAsDecoder(t, doc) {
			taken++
		}
		i := r.IntN(len(doc))
		const noise = "{}[]\",:0-e.\\u t"
		for _, m := range [][]byte{
			append(append([]byte{}, doc[:i]...), doc[i+1:]...),
			append(append([]byte{}, doc[:i+1]...), doc[i:]...),
			append(append(append([]byte{}, doc[:i]...), noise[r.IntN(len(noise))]), doc[i+1:]...),
		} {
			sameAsDecoder(t, m)
		}
	}
	// Half the generated documents hold a surrogate, a NUL or a repeated name; the fast path must
	// be taking them, or this test compares nothing.
	if taken < 1000 {
		t.Fatalf("the fast path took %d of 3000 generated documents", taken)
	}
}

func genSpace(r *rand.Rand, b *strings.Builder) {
	if r.IntN(4) == 0 {
		b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[r.IntN(4)])
	}
}

func genObject(r *rand.Rand, b *strings.Builder, depth int) {
	b.WriteByte('{')
	n := r.IntN(5)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		genSpace(r, b)
		genString(r, b)
		genSpace(r, b)
		b.WriteByte(':')
		genSpace(r, b)
		genValue(r, b, depth+1)
		genSpace(r, b)
	}
	b.WriteByte('}')
}

func genValue(r *rand.Rand, b *strings.Builder, depth int) {
	k := r.IntN(9)
	if depth > 4 && k < 2 {
		k = 2
	}
	switch k {
	case 0:
		genObject(r, b, depth)
	case 1:
		b.WriteByte('[')
		for i, n := 0, r.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			genSpace(r, b)
			genValue(r, b, depth+1)
			genSpace(r, b)
		}
		b.WriteByte(']')
	case 2, 3, 4:
		genString(r, b)
	case 5, 6:
		genNumber(r, b)
	default:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	}
}

func genString(r *rand.Rand, b *strings.Builder) {
	parts := []string{"a", "Z", "amount", " ", "é", "e\u0301", "中", "\\n", "\\\"", "\\\\", "\\/", "\\t",
		"\\u00e9", "\\u0065\\u0301", "\\u4E2D", "\\ud83d\\ude00", "\\u0000", "<&>", "\u00a0", "x y"}
	b.WriteByte('"')
	for i, n := 0, r.IntN(5); i < n; i++ {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	b.WriteByte('"')
}

func genNumber(r *rand.Rand, b *strings.Builder) {
	if r.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if r.IntN(4) == 0 {
		b.WriteByte('0')
	} else {
		b.WriteString(strconv.FormatUint(r.Uint64N(1<<uint(r.IntN(63)+1)), 10))
	}
	if r.IntN(3) == 0 {
		b.WriteString("." + strconv.Itoa(r.IntN(100000)))
	}
	if r.IntN(4) == 0 {
		b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)] + strconv.Itoa(r.IntN(30)))
	}
}

// FuzzQuickParse: whatever the fast path accepts, encoding/json reads to the same tree.
func FuzzQuickParse(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"s":"caf\u00e9","n":[1.50,-0,1e2]}`, `{"a":{"b":[true,null]}}`, `{"a":"\ud83d\ude00"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		sameAsDecoder(t, []byte(raw))
	})
}
