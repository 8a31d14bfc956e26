package reconcile

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemops/idemops/money"
)

// fuzzStatement feeds the format's fixtures as seeds and checks, for any input, that the parser
// does not panic, that a rejection is a typed error, and that an accepted statement's lines keep
// the invariants the importer relies on.
func fuzzStatement(f *testing.F, p Parser, seedGlob string) {
	files, _ := filepath.Glob(seedGlob)
	if len(files) == 0 {
		f.Fatalf("no seeds match %s", seedGlob)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var lines int
		var total int64
		prev := 0
		sum, err := p.Parse(context.Background(), bytes.NewReader(data), func(l StatementLine) error {
			lines++
			total += l.AmountMinor
			checkLineInvariants(t, l, prev)
			prev = l.LineNo
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrControlTotal) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if sum.Lines != lines || sum.TotalMinor != total || !sum.ControlTotalsOK() {
			t.Fatalf("summary %+v disagrees with %d lines totalling %d", sum, lines, total)
		}
	})
}

func checkLineInvariants(t *testing.T, l StatementLine, prev int) {
	t.Helper()
	if l.LineNo <= prev {
		t.Fatalf("line %d after line %d", l.LineNo, prev)
	}
	if l.MerchantOrderNo == "" && l.ChannelTxnID == "" {
		t.Fatalf("line %d: no order number and no txn id", l.LineNo)
	}
	if _, ok := money.Exponent(l.Currency); !ok {
		t.Fatalf("line %d: currency %q", l.LineNo, l.Currency)
	}
	if back, err := money.Parse(money.Format(l.AmountMinor, l.Currency), l.Currency); err != nil || back != l.AmountMinor {
		t.Fatalf("line %d: amount %d does not round-trip: %v", l.LineNo, l.AmountMinor, err)
	}
	if !l.Status.Valid() {
		t.Fatalf("line %d: status %q", l.LineNo, l.Status)
	}
	if w := l.Status.sign(); w != 0 && l.AmountMinor != 0 && (l.AmountMinor > 0) != (w > 0) {
		t.Fatalf("line %d: %s with amount %d", l.LineNo, l.Status, l.AmountMinor)
	}
	if l.OccurredAt.IsZero() || l.OccurredAt.Location().String() != "UTC" {
		t.Fatalf("line %d: occurred_at %v", l.LineNo, l.OccurredAt)
	}
	if strings.TrimSpace(l.Raw) == "" {
		t.Fatalf("line %d: no raw row", l.LineNo)
	}
}

func mustParser(f *testing.F, format string, opts ...Option) Parser {
	p, err := ParserFor(format, opts...)
	if err != nil {
		f.Fatal(err)
	}
	return p
}

func FuzzParseWechat(f *testing.F) {
	fuzzStatement(f, mustParser(f, "wechat", WithMaxBytes(1<<20)), "testdata/wechat/*.csv")
}

func FuzzParseAlipay(f *testing.F) {
	fuzzStatement(f, mustParser(f, "alipay", WithMaxBytes(1<<20)), "testdata/alipay/*.csv")
}

func FuzzParseStripe(f *testing.F) {
	fuzzStatement(f, mustParser(f, "stripe", WithMaxBytes(1<<20)), "testdata/stripe/*.csv")
}

func FuzzParseAdyen(f *testing.F) {
	fuzzStatement(f, mustParser(f, "adyen", WithMaxBytes(1<<20)), "testdata/adyen/*.csv")
}

func FuzzParseProfile(f *testing.F) {
	prof, err := LoadProfile("testdata/profile/acmepay/profile.yaml")
	if err != nil {
		f.Fatal(err)
	}
	fuzzStatement(f, mustParser(f, FormatProfile, WithProfile(prof), WithMaxBytes(1<<20)), "testdata/profile/acmepay/*.csv")
}

func FuzzParseProfileGBK(f *testing.F) {
	prof, err := LoadProfile("testdata/profile/gbkpay/profile.yaml")
	if err != nil {
		f.Fatal(err)
	}
	fuzzStatement(f, mustParser(f, FormatProfile, WithProfile(prof), WithMaxBytes(1<<20)), "testdata/profile/gbkpay/*.csv")
}

// FuzzLoadProfile: any YAML either fails with ErrProfile or yields a profile that can parse.
func FuzzLoadProfile(f *testing.F) {
	for _, file := range []string{"testdata/profile/acmepay/profile.yaml", "testdata/profile/gbkpay/profile.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodProfile))
	f.Fuzz(func(t *testing.T, data []byte) {
		prof, err := ParseProfile("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrProfile) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		p, err := ParserFor(FormatProfile, WithProfile(prof))
		if err != nil {
			t.Fatal(err)
		}
		p.Parse(context.Background(), bytes.NewReader([]byte("a,b\n1,2\n")), func(StatementLine) error { return nil })
	})
}
