package reconcile

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// parseString runs a parser over text and collects the lines.
func parseString(t *testing.T, format, text string, opts ...Option) ([]StatementLine, *Summary, error) {
	t.Helper()
	p, err := ParserFor(format, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var lines []StatementLine
	sum, err := p.Parse(context.Background(), strings.NewReader(text), func(l StatementLine) error {
		lines = append(lines, l)
		return nil
	})
	return lines, sum, err
}

const stripeHeader = "balance_transaction_id,created_utc,currency,gross,reporting_category,charge_id,payment_metadata[order_no]\n"

func TestRecords_QuotedFieldsMayHoldSeparatorsQuotesAndNewlines(t *testing.T) {
	t.Parallel()
	text := stripeHeader +
		"txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,\"ORD, \"\"one\"\"\"\n" +
		"\n" +
		"txn_2,2024-03-01 10:00:00,usd,2.00,charge,ch_2,\"ORD\ntwo\"\n" +
		"txn_3,2024-03-01 10:00:00,usd,3.00,charge,ch_3,ORD-3\n"
	lines, _, err := parseString(t, "stripe", text)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line  int
		order string
	}{{2, `ORD, "one"`}, {4, "ORD\ntwo"}, {6, "ORD-3"}}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines", len(lines))
	}
	for i, w := range want {
		if lines[i].LineNo != w.line || lines[i].MerchantOrderNo != w.order {
			t.Errorf("line %d: got line %d order %q; want %d %q", i, lines[i].LineNo, lines[i].MerchantOrderNo, w.line, w.order)
		}
	}
}

func TestRecords_BOMAndCRLFAreNotPartOfTheData(t *testing.T) {
	t.Parallel()
	text := "\ufeff" + strings.ReplaceAll(stripeHeader+"txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,ORD-1\n", "\n", "\r\n")
	lines, _, err := parseString(t, "stripe", text)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || lines[0].MerchantOrderNo != "ORD-1" || lines[0].ChannelTxnID != "ch_1" {
		t.Fatalf("lines %+v", lines)
	}
}

func TestRecords_ErrorsNameThePhysicalLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, want string
	}{
		{"unclosed quote", stripeHeader + "txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,\"ORD\n\n", "line 2: quoted field is not closed"},
		{"text after quote", stripeHeader + "txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,\"ORD\"x\n", "line 2: field 7: text after the closing quote"},
		{"invalid utf-8", stripeHeader + "\n\ntxn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,OR\xffD\n", "line 4: bytes that are not valid UTF-8"},
		{"empty file", "", "line 1: no header row"},
		{"only blank lines", "\n\r\n  \n", "line 4: no header row"},
		{"no ids", stripeHeader + "txn_1,2024-03-01 10:00:00,usd,1.00,charge,,\n", "line 2: neither a merchant order number nor a channel transaction id"},
		{"empty amount", stripeHeader + "txn_1,2024-03-01 10:00:00,usd,,charge,ch_1,ORD\n", "line 2: gross: empty amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := parseString(t, "stripe", tt.text)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v; want %q", err, tt.want)
			}
		})
	}
}

func TestRecords_SizeLimits(t *testing.T) {
	t.Parallel()
	row := "txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,ORD-1\n"
	text := stripeHeader + strings.Repeat(row, 100)

	_, _, err := parseString(t, "stripe", text, WithMaxBytes(int64(len(text))))
	if err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
	_, _, err = parseString(t, "stripe", text, WithMaxBytes(int64(len(text)-1)))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over the limit: %v", err)
	}
	long := stripeHeader + "txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1," + strings.Repeat("x", 200) + "\n"
	_, _, err = parseString(t, "stripe", long, WithMaxLineBytes(128))
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "line 2: line longer than 128 bytes") {
		t.Fatalf("overlong line: %v", err)
	}
}

func TestRecords_GzippedStatementIsReadAndStillLimited(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/wechat/all_trades.csv")
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(data)
	w.Close()
	lines, sum, err := parseString(t, "wechat", gz.String())
	if err != nil || len(lines) != 4 || sum.Bytes != int64(len(data)) {
		t.Fatalf("gzipped bill: %d lines, %+v, %v", len(lines), sum, err)
	}
	// The limit counts decompressed bytes, so a small bomb cannot expand past it.
	_, _, err = parseString(t, "wechat", gz.String(), WithMaxBytes(int64(len(data)/2)))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("gzipped bill over the limit: %v", err)
	}
}

func TestParse_ControlTotalErrorKeepsStatedAndComputed(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/wechat/bad_control_count.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := parseString(t, "wechat", string(data))
	var cte *ControlTotalError
	if !errors.As(err, &cte) || !errors.Is(err, ErrControlTotal) {
		t.Fatalf("error %v is not a ControlTotalError", err)
	}
	if sum == nil || sum.ControlTotalsOK() || sum.Control != cte.Totals {
		t.Fatalf("summary %+v does not carry the failed totals", sum)
	}
	first := cte.Totals.Checks[0]
	if first.Name != "总交易单数" || first.Stated != "5" || first.Computed != "4" || first.OK {
		t.Errorf("count check %+v", first)
	}
}

func TestParse_StatementsWithoutControlTotalsSayNone(t *testing.T) {
	t.Parallel()
	_, sum, err := parseString(t, "stripe", stripeHeader+"txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,ORD-1\n")
	if err != nil {
		t.Fatal(err)
	}
	if sum.Control != nil || !sum.ControlTotalsOK() {
		t.Fatalf("control totals %+v", sum.Control)
	}
}

func TestParse_CallbackErrorStopsAndIsReturned(t *testing.T) {
	t.Parallel()
	p, _ := ParserFor("wechat")
	f, err := os.Open("testdata/wechat/all_trades.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := errors.New("copy failed")
	calls := 0
	_, err = p.Parse(context.Background(), f, func(StatementLine) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestParse_CancelledContextStopsALongStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, _ := ParserFor("stripe")
	text := stripeHeader + strings.Repeat("txn_1,2024-03-01 10:00:00,usd,1.00,charge,ch_1,ORD-1\n", 5000)
	_, err := p.Parse(ctx, strings.NewReader(text), func(StatementLine) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestParserFor(t *testing.T) {
	t.Parallel()
	want := []string{"adyen", "alipay", "profile", "stripe", "wechat"}
	if got := Formats(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Formats() = %v", got)
	}
	for _, f := range want[:1] {
		if p, err := ParserFor(f); err != nil || p.Format() != f {
			t.Errorf("ParserFor(%s) = %v, %v", f, p, err)
		}
	}
	_, err := ParserFor("paypal")
	if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "known: adyen, alipay, profile, stripe, wechat") {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := ParserFor("profile"); !errors.Is(err, ErrProfile) {
		t.Errorf("profile without a profile: %v", err)
	}
}

func TestWechat_RefundRowsAreNegativeAndNeedTheRefundColumn(t *testing.T) {
	t.Parallel()
	lines, _, err := parseString(t, "wechat", mustRead(t, "testdata/wechat/all_trades.csv"))
	if err != nil {
		t.Fatal(err)
	}
	r := lines[2]
	if r.Status != StatusRefund || r.AmountMinor != -2800 || r.MerchantOrderNo != "ORD-20240301-0001" ||
		r.ChannelTxnID != "4200002156202403011234567890" {
		t.Fatalf("refund line %+v", r)
	}
	if want := time.Date(2024, 3, 1, 10, 2, 9, 0, time.UTC); !r.OccurredAt.Equal(want) {
		t.Errorf("occurred_at %v; want %v (18:02:09 in Shanghai)", r.OccurredAt, want)
	}
	// The 18-column layout has no refund columns: a REFUND row there cannot be read.
	old := mustRead(t, "testdata/wechat/older_layout.csv")
	old = strings.Replace(old, "`SUCCESS", "`REFUND", 1)
	if _, _, err := parseString(t, "wechat", old); err == nil || !strings.HasPrefix(err.Error(), "line 2: a REFUND row, but the header has no 退款金额 column") {
		t.Fatalf("refund in the old layout: %v", err)
	}
}

func TestWechat_ContentAfterTheSummaryIsRejected(t *testing.T) {
	t.Parallel()
	text := mustRead(t, "testdata/wechat/all_trades.csv") + "`2024-03-02 00:00:01,`x\n"
	if _, _, err := parseString(t, "wechat", text); err == nil || !strings.HasPrefix(err.Error(), "line 8: unexpected content after the summary row") {
		t.Fatalf("err %v", err)
	}
}

func TestAlipay_DetailRowAfterTheFooterIsRejected(t *testing.T) {
	t.Parallel()
	src := mustRead(t, "testdata/alipay/src/trade_detail.utf8.csv")
	lines := strings.Split(src, "\r\n")
	lines = append(lines[:len(lines)-1], lines[5], "") // a detail row after the footer
	data := encodeGBKFixture(t, []byte(strings.Join(lines, "\r\n")))
	if _, _, err := parseString(t, "alipay", string(data)); err == nil || !strings.HasPrefix(err.Error(), "line 14: a detail row after the footer began on line 10") {
		t.Fatalf("err %v", err)
	}
}

func TestAdyenZone(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 7, 1, 12, 0, 0, 0, time.UTC)
	for zone, offset := range map[string]int{"CET": 3600, "CEST": 7200, "UTC": 0, "PST": -8 * 3600, "IST": 19800,
		"+05:30": 19800, "GMT-3": -3 * 3600, "UTC+01:00": 3600, "Europe/Amsterdam": 7200, "America/New_York": -4 * 3600} {
		loc, err := adyenZone(zone)
		if err != nil {
			t.Errorf("%s: %v", zone, err)
			continue
		}
		if _, off := at.In(loc).Zone(); off != offset {
			t.Errorf("%s: offset %d; want %d", zone, off, offset)
		}
	}
	for _, zone := range []string{"", "Mars/Olympus", "+25:00", "XYZ", "../etc/passwd"} {
		if _, err := adyenZone(zone); err == nil {
			t.Errorf("%q accepted", zone)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestAlipay_ASecondFooterTotalIsRejected(t *testing.T) {
	t.Parallel()
	src := mustRead(t, "testdata/alipay/src/trade_detail.utf8.csv")
	src = strings.Replace(src, "#导出时间", "#交易合计\r\n#导出时间", 1)
	data := encodeGBKFixture(t, []byte(src))
	if _, _, err := parseString(t, "alipay", string(data)); err == nil || !strings.HasPrefix(err.Error(), "line 13: a second #交易合计 line (the first is line 11)") {
		t.Fatalf("err %v", err)
	}
}
