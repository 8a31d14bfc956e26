package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
)

var update = flag.Bool("update", false, "rewrite the GBK fixtures and the golden files under testdata/")

// invalidGBKMarker in a UTF-8 fixture source becomes the byte 0xFF, which GBK does not allow.
const invalidGBKMarker = "<0xFF>"

// encodeGBKFixture turns a UTF-8 fixture source into the GBK bytes a channel would serve.
func encodeGBKFixture(t testing.TB, src []byte) []byte {
	t.Helper()
	var out []byte
	for i, part := range bytes.Split(src, []byte(invalidGBKMarker)) {
		if i > 0 {
			out = append(out, 0xFF)
		}
		enc, err := simplifiedchinese.GBK.NewEncoder().Bytes(part)
		if err != nil {
			t.Fatalf("encode GBK: %v", err)
		}
		out = append(out, enc...)
	}
	return out
}

// TestGBKFixturesAreTheirSourcesInGBK keeps each committed GBK file (alipay/*.csv,
// profile/gbkpay/statement.csv) equal to its readable UTF-8 source under src/.
func TestGBKFixturesAreTheirSourcesInGBK(t *testing.T) {
	sources, _ := filepath.Glob("testdata/*/src/*.utf8.csv")
	more, _ := filepath.Glob("testdata/*/*/src/*.utf8.csv")
	sources = append(sources, more...)
	if len(sources) == 0 {
		t.Fatal("no GBK fixture sources")
	}
	for _, src := range sources {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		want := encodeGBKFixture(t, data)
		dst := filepath.Join(filepath.Dir(filepath.Dir(src)), strings.TrimSuffix(filepath.Base(src), ".utf8.csv")+".csv")
		if *update {
			if err := os.WriteFile(dst, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not %s in GBK (run go test ./reconcile -run GBK -update): %v", dst, src, err)
		}
	}
}

// fixture is one statement file under testdata and the parser that reads it.
type fixture struct {
	path   string
	parser Parser
}

func fixtures(t *testing.T) []fixture {
	t.Helper()
	var out []fixture
	for _, format := range []string{"wechat", "alipay", "stripe", "adyen"} {
		p, err := ParserFor(format)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join("testdata", format, "*.csv"))
		if len(files) == 0 {
			t.Fatalf("no fixtures for %s", format)
		}
		for _, f := range files {
			if strings.HasSuffix(f, summarySuffix) {
				continue // the summary file of the fixture beside it
			}
			summary := strings.TrimSuffix(f, ".csv") + summarySuffix
			if _, err := os.Stat(summary); err == nil {
				out = append(out, fixture{f, withSummary{format, summary}})
				continue
			}
			out = append(out, fixture{f, p})
		}
	}
	profiles, _ := filepath.Glob("testdata/profile/*/profile.yaml")
	for _, pf := range profiles {
		prof, err := LoadProfile(pf)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParserFor(FormatProfile, WithProfile(prof))
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(pf), "*.csv"))
		for _, f := range files {
			out = append(out, fixture{f, p})
		}
	}
	return out
}

// summarySuffix names the separate summary file of a fixture (Alipay's 汇总): NAME.csv is read
// with NAME.summary.csv.
const summarySuffix = ".summary.csv"

// withSummary is the parser of a format reading the fixture's summary file as well.
type withSummary struct {
	format, path string
}

func (w withSummary) Format() string { return w.format }

func (w withSummary) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := ParserFor(w.format, WithSummaryFile(f))
	if err != nil {
		return nil, err
	}
	return p.Parse(ctx, r, fn)
}

// render is what a golden file holds: one JSON object per normalized line, then the summary and
// the error text if the statement was rejected.
func render(t *testing.T, p Parser, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	sum, err := p.Parse(context.Background(), f, func(l StatementLine) error { return enc.Encode(l) })
	end := map[string]any{"summary": sum}
	if err != nil {
		end["error"] = err.Error()
	}
	if err := enc.Encode(end); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	for _, fx := range fixtures(t) {
		t.Run(fx.path, func(t *testing.T) {
			got := render(t, fx.parser, fx.path)
			golden := strings.TrimSuffix(fx.path, ".csv") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./reconcile -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s (run go test ./reconcile -update and review the diff):\n%s", fx.path, golden, got)
			}
		})
	}
}

// TestFixturesThatParse pins down the well-formed fixtures beyond their golden files: line
// counts, totals and control totals.
func TestFixturesThatParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path       string
		lines      int
		skipped    int
		byCurrency map[string]int64
		control    bool // the format states control totals
	}{
		{"wechat/all_trades.csv", 4, 0, map[string]int64{"CNY": 12800 + 50 - 2800 + 123456}, true},
		{"wechat/crlf_bom_quoted.csv", 4, 0, map[string]int64{"CNY": 12800 + 50 - 2800 + 123456}, true},
		{"wechat/older_layout.csv", 2, 0, map[string]int64{"CNY": 2}, true},
		{"alipay/trade_detail.csv", 4, 0, map[string]int64{"CNY": 8800 + 118850 - 2000 + 1850}, true},
		{"stripe/itemized.csv", 3, 2, map[string]int64{"USD": 4999 - 1000, "JPY": 5000}, false},
		{"adyen/settlement_detail_report_batch_42.csv", 4, 2, map[string]int64{"EUR": 10000 - 2500 - 4990, "JPY": 12000}, false},
		{"profile/acmepay/statement.csv", 5, 1, map[string]int64{"EUR": 125000 + 1999 - 25000 + 500 - 8000}, false},
		{"profile/gbkpay/statement.csv", 4, 0, map[string]int64{"CNY": 9900 + 120 - 900 + 500}, false},
	}
	all := fixturesByPath(t)
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			fx, f := openFixture(t, all, tt.path)
			prev := 0
			sum, err := fx.parser.Parse(context.Background(), f, func(l StatementLine) error {
				if l.LineNo <= prev {
					t.Errorf("line numbers not increasing: %d after %d", l.LineNo, prev)
				}
				prev = l.LineNo
				if l.OccurredAt.Location() != time0.Location() {
					t.Errorf("line %d: occurred_at %v is not UTC", l.LineNo, l.OccurredAt)
				}
				if !strings.Contains(l.Raw, l.MerchantOrderNo) || !strings.Contains(l.Raw, l.ChannelTxnID) {
					t.Errorf("line %d: raw row %q does not hold the ids", l.LineNo, l.Raw)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if sum.Lines != tt.lines || sum.SkippedRows() != tt.skipped {
				t.Errorf("lines %d skipped %d; want %d and %d", sum.Lines, sum.SkippedRows(), tt.lines, tt.skipped)
			}
			var total int64
			for cur, want := range tt.byCurrency {
				total += want
				if sum.ByCurrency[cur] != want {
					t.Errorf("%s total %d; want %d", cur, sum.ByCurrency[cur], want)
				}
			}
			if len(sum.ByCurrency) != len(tt.byCurrency) || sum.TotalMinor != total {
				t.Errorf("totals %v (%d); want %v", sum.ByCurrency, sum.TotalMinor, tt.byCurrency)
			}
			if (sum.Control != nil) != tt.control || !sum.ControlTotalsOK() {
				t.Errorf("control totals %+v; want present=%v and agreeing", sum.Control, tt.control)
			}
		})
	}
}

var time0 = (StatementLine{}).OccurredAt.UTC()

// TestMalformedStatementsFailAtTheirLine: every bad fixture is rejected, with the physical line
// number of the problem and its reason, and with the error's kind.
func TestMalformedStatementsFailAtTheirLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		kind error
		want string // the start of the error text
	}{
		{"wechat/bad_amount.csv", ErrMalformed, `line 3: 订单金额: amount "12.345" has more than 2 decimals`},
		{"wechat/bad_time.csv", ErrMalformed, `line 5: 交易时间: time "2024/03/01 23:59:58"`},
		{"wechat/bad_missing_column.csv", ErrMalformed, "line 1: missing column 商户订单号"},
		{"wechat/bad_short_row.csv", ErrMalformed, "line 4: 26 fields, but the header on line 1 has 27"},
		{"wechat/bad_status.csv", ErrMalformed, `line 3: 交易状态: unknown value "PAID"`},
		{"wechat/bad_truncated.csv", ErrMalformed, "line 3: the statement ends without the summary"},
		{"wechat/bad_control_count.csv", ErrControlTotal, "line 7: CONTROL_TOTAL: details do not add up to the summary row: 总交易单数 stated 5, computed 4"},
		{"wechat/bad_control_amount.csv", ErrControlTotal, "line 7: CONTROL_TOTAL: details do not add up to the summary row: 应结订单总金额 stated 1363.07, computed 1363.06; 订单总金额 stated 1363.07, computed 1363.06"},
		{"alipay/bad_amount.csv", ErrMalformed, `line 9: 商家实收（元）: malformed amount "18.5O"`},
		{"alipay/bad_not_gbk.csv", ErrMalformed, "line 7: bytes that are not valid GBK"},
		{"alipay/bad_missing_column.csv", ErrMalformed, "line 5: missing column 商家实收（元）"},
		{"alipay/bad_business_type.csv", ErrMalformed, `line 8: 业务类型: unknown value "转账"`},
		{"alipay/bad_refund_sign.csv", ErrMalformed, "line 8: refund with amount 20.00: a refund must be negative"},
		{"alipay/bad_truncated.csv", ErrMalformed, "line 7: no #交易合计 footer line: truncated?"},
		{"alipay/bad_summary_amount.csv", ErrMalformed, `汇总 line 7: 实收净额（元）: malformed amount "1,267.3.5"`},
		{"alipay/bad_footer_missing_refund.csv", ErrMalformed, "line 11: no #退款合计 footer line: truncated?"},
		{"alipay/bad_control_total.csv", ErrControlTotal, "line 11: CONTROL_TOTAL: details do not add up to the footer: 交易合计/笔 stated 4, computed 3; 交易合计/商家实收 stated 1395.00, computed 1295.00"},
		{"alipay/bad_refund_total.csv", ErrControlTotal, "line 11: CONTROL_TOTAL: details do not add up to the footer: 退款合计/商家实收退款 stated -2.00, computed -20.00"},
		{"stripe/bad_category.csv", ErrMalformed, `line 4: reporting_category: unknown value "refund_adjustment"`},
		{"stripe/bad_gross.csv", ErrMalformed, `line 3: gross: amount "5000.5" has more than 0 decimals`},
		{"stripe/bad_missing_column.csv", ErrMalformed, "line 1: missing column gross"},
		{"stripe/bad_currency.csv", ErrMalformed, `line 2: currency: unknown currency "usx"`},
		{"stripe/bad_refund_sign.csv", ErrMalformed, "line 3: refund with amount 10.00: a refund must be negative"},
		{"adyen/bad_type.csv", ErrMalformed, `line 3: Type: unknown value "Reversed"`},
		{"adyen/bad_both_amounts.csv", ErrMalformed, "line 4: both Gross Credit (GC) and Gross Debit (GC) are filled"},
		{"adyen/bad_timezone.csv", ErrMalformed, `line 3: TimeZone: unknown time zone "Mars/Olympus"`},
		{"adyen/bad_missing_column.csv", ErrMalformed, "line 1: missing column Merchant Reference"},
		{"profile/acmepay/bad_status.csv", ErrMalformed, `line 9: Kind: value "PENDING" is not in the profile's status_map`},
		{"profile/acmepay/bad_negative.csv", ErrMalformed, "line 7: Amount: negative amount in a profile with sign: unsigned"},
		{"profile/acmepay/bad_amount.csv", ErrMalformed, `line 5: Amount: malformed amount "19,99"`},
		{"profile/acmepay/bad_header_row.csv", ErrMalformed, "line 3: missing column Amount"},
	}
	all := fixturesByPath(t)
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			fx, f := openFixture(t, all, tt.path)
			_, err := fx.parser.Parse(context.Background(), f, func(StatementLine) error { return nil })
			if err == nil {
				t.Fatalf("Parse accepted %s", tt.path)
			}
			if !errors.Is(err, tt.kind) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %q (kind ok: %v);\nwant %q, kind %v", err, errors.Is(err, tt.kind), tt.want, tt.kind)
			}
		})
	}
	// Every bad_ fixture is in the table: a new one cannot go unchecked.
	listed := map[string]bool{}
	for _, tt := range tests {
		listed[tt.path] = true
	}
	for p := range all {
		if strings.HasPrefix(filepath.Base(p), "bad_") && !listed[p] {
			t.Errorf("fixture %s is not in the table", p)
		}
	}
}

// fixturesByPath indexes the fixtures by their path below testdata/.
func fixturesByPath(t *testing.T) map[string]fixture {
	all := map[string]fixture{}
	for _, fx := range fixtures(t) {
		all[strings.TrimPrefix(fx.path, "testdata/")] = fx
	}
	return all
}

// openFixture opens the fixture at path (below testdata/); it is closed when the test ends.
func openFixture(t *testing.T, all map[string]fixture, path string) (fixture, *os.File) {
	t.Helper()
	fx, ok := all[path]
	if !ok {
		t.Fatalf("no fixture %s", path)
	}
	f, err := os.Open(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return fx, f
}
