package reconcile

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// corruptCell rewrites one cell of a physical line of a CSV text, finding the column by its
// name in the header on headerLine. WeChat's backtick prefix is kept.
func corruptCell(t *testing.T, text string, headerLine, line int, column, value string) string {
	t.Helper()
	eol := "\n"
	if strings.Contains(text, "\r\n") {
		eol = "\r\n"
	}
	lines := strings.Split(text, eol)
	readLine := func(n int) []string {
		r := csv.NewReader(strings.NewReader(lines[n-1]))
		r.LazyQuotes = true
		rec, err := r.Read()
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		return rec
	}
	col := -1
	for i, n := range readLine(headerLine) {
		if strings.TrimSpace(n) == column {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("no column %s", column)
	}
	rec := readLine(line)
	if strings.HasPrefix(rec[col], "`") {
		value = "`" + value
	}
	rec[col] = value
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	lines[line-1] = strings.TrimSuffix(b.String(), "\n")
	return strings.Join(lines, eol)
}

// TestEveryMoneyColumnIsValidated: a malformed value in any money column of any row fails the
// parse at that line and column, whether or not the parser uses the column, and whether or not
// the row is an order line.
func TestEveryMoneyColumnIsValidated(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		format, fixture    string
		headerLine, line   int
		column, value, why string
	}{
		{"wechat", "testdata/wechat/all_trades.csv", 1, 2, "订单金额", "105.0.0", "malformed"},
		{"wechat", "testdata/wechat/all_trades.csv", 1, 3, "代金券金额", "1,00", "malformed"},
		{"wechat", "testdata/wechat/all_trades.csv", 1, 4, "手续费", "-0.170001", "more than 5 decimals"},
		{"wechat", "testdata/wechat/all_trades.csv", 1, 5, "应结订单金额", "1e3", "malformed"},
		{"wechat", "testdata/wechat/all_trades.csv", 1, 5, "申请退款金额", "0.001", "more than 2 decimals"},
		{"wechat", "testdata/wechat/older_layout.csv", 1, 3, "代金券或立减优惠金额", "x", "malformed"},
		{"alipay", "testdata/alipay/src/trade_detail.utf8.csv", 5, 6, "订单金额（元）", "105.0.0", "malformed"},
		{"alipay", "testdata/alipay/src/trade_detail.utf8.csv", 5, 7, "商家优惠（元）", "1.234", "more than 2 decimals"},
		{"alipay", "testdata/alipay/src/trade_detail.utf8.csv", 5, 8, "服务费（元）", "--0.12", "malformed"},
		{"alipay", "testdata/alipay/src/trade_detail.utf8.csv", 5, 9, "分润（元）", "0.0.0", "malformed"},
		{"alipay", "testdata/alipay/src/trade_detail.utf8.csv", 5, 6, "集分宝（元）", "NaN", "malformed"},
		{"stripe", "testdata/stripe/itemized.csv", 1, 2, "net", "48.24.1", "malformed"},
		{"stripe", "testdata/stripe/itemized.csv", 1, 3, "fee", "-180.5", "more than 0 decimals"},
		{"stripe", "testdata/stripe/itemized.csv", 1, 4, "customer_facing_amount", "10.0.0", "malformed"},
		{"stripe", "testdata/stripe/itemized.csv", 1, 5, "gross", "-2.00x", "malformed"}, // a fee row, not an order line
		{"adyen", "testdata/adyen/settlement_detail_report_batch_42.csv", 1, 2, "Interchange (NC)", "1.5.0", "malformed"},
		{"adyen", "testdata/adyen/settlement_detail_report_batch_42.csv", 1, 3, "Net Credit (NC)", "71.101", "more than 2 decimals"},
		{"adyen", "testdata/adyen/settlement_detail_report_batch_42.csv", 1, 6, "Net Debit (NC)", "0,10", "malformed"}, // a Fee row
		{"adyen", "testdata/adyen/settlement_detail_report_batch_42.csv", 1, 2, "Exchange Rate", "one", "not a non-negative decimal"},
	}
	for _, tt := range tests {
		t.Run(tt.format+"/"+tt.column+"/"+tt.value, func(t *testing.T) {
			t.Parallel()
			good := read(tt.fixture)
			if _, _, err := parseString(t, tt.format, gbkIf(t, tt.format, good)); err != nil {
				t.Fatalf("the uncorrupted fixture does not parse: %v", err)
			}
			bad := gbkIf(t, tt.format, corruptCell(t, good, tt.headerLine, tt.line, tt.column, tt.value))
			lines, _, err := parseString(t, tt.format, bad)
			want := fmt.Sprintf("line %d: ", tt.line) + tt.column + ": "
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("error %v; want %q…%s", err, want, tt.why)
			}
			for _, l := range lines {
				if l.LineNo >= tt.line {
					t.Errorf("line %d was handed on after the error", l.LineNo)
				}
			}
		})
	}
}

func gbkIf(t *testing.T, format, text string) string {
	if format != "alipay" {
		return text
	}
	return string(encodeGBKFixture(t, []byte(text)))
}

// TestAmountFeeNet: the three amounts of a line mean the same in every format: amount_minor is
// what we asked for (Alipay: 订单金额, not 商家实收 lowered by a merchant discount), fee_minor the
// channel's fee as a positive number, net_minor what the merchant is credited; fees stay exact at
// the channel's precision (WeChat 手续费 has five decimals).
func TestAmountFeeNet(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Alipay: 订单金额 105.00, 商家优惠 10.00, 商家实收 95.00, 服务费 -0.63 → 10500, 63, 9437.
	ali := read("testdata/alipay/src/trade_detail.utf8.csv")
	for col, v := range map[string]string{"订单金额（元）": "105.00", "商家优惠（元）": "10.00", "商家实收（元）": "95.00", "服务费（元）": "-0.63"} {
		ali = corruptCell(t, ali, 5, 6, col, v)
	}
	ali = strings.Replace(ali, "商家实收共1,295.00元", "商家实收共1,302.00元", 1)
	// The footer states the 商家优惠 total too: it is checked.
	if _, _, err := parseString(t, "alipay", string(encodeGBKFixture(t, []byte(ali)))); err == nil ||
		!errors.Is(err, ErrControlTotal) || !strings.Contains(err.Error(), "交易合计/商家优惠 stated 0.00, computed 10.00") {
		t.Errorf("a footer whose 商家优惠 total disagrees: %v", err)
	}
	ali = strings.Replace(ali, "商家优惠共0.00元", "商家优惠共10.00元", 1)
	lines, _, err := parseString(t, "alipay", string(encodeGBKFixture(t, []byte(ali))))
	if err != nil {
		t.Fatal(err)
	}
	if l := lines[0]; l.AmountMinor != 10500 || l.FeeMinor != 63000 || l.NetMinor != 9437000 {
		t.Errorf("alipay discounted trade: amount %d fee %s net %s; want 10500, 63, 9437", l.AmountMinor, l.FeeMinor, l.NetMinor)
	}
	if l := lines[2]; l.Status != StatusRefund || l.AmountMinor != -2000 || l.FeeMinor.String() != "-12" || l.NetMinor.String() != "-1988" {
		t.Errorf("alipay refund: amount %d fee %s net %s; want -2000, -12 (the fee returned), -1988", l.AmountMinor, l.FeeMinor, l.NetMinor)
	}

	// WeChat: a 手续费 of 0.00020 yuan is 0.02 fen, kept exact; net = 应结订单金额 − 手续费.
	wx := corruptCell(t, read("testdata/wechat/all_trades.csv"), 1, 3, "手续费", "0.00020")
	lines, _, err = parseString(t, "wechat", wx)
	if err != nil {
		t.Fatal(err)
	}
	l := lines[1]
	if l.AmountMinor != 50 || l.FeeMinor != 20 || l.NetMinor != 49980 {
		t.Errorf("wechat: amount %d fee %d net %d (SubMinor); want 50, 20, 49980", l.AmountMinor, l.FeeMinor, l.NetMinor)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"amount_minor":50,`) || !strings.Contains(string(b), `"fee_minor":0.02,"net_minor":49.98`) {
		t.Errorf("JSON %s; want amount_minor 50, fee_minor 0.02, net_minor 49.98", b)
	}
	var back StatementLine
	if err := json.Unmarshal(b, &back); err != nil || back.FeeMinor != l.FeeMinor || back.NetMinor != l.NetMinor {
		t.Errorf("JSON round trip: %+v, %v", back, err)
	}

	// Stripe: a fee that is not gross − net is a corrupt row.
	st := corruptCell(t, read("testdata/stripe/itemized.csv"), 1, 2, "fee", "-1.76")
	if _, _, err := parseString(t, "stripe", st); err == nil || !strings.HasPrefix(err.Error(), "line 2: fee: -1.76 is not gross − net") {
		t.Errorf("stripe fee disagreeing with gross − net: %v", err)
	}
}

// TestWechatFeeTotal: 手续费总金额 is checked against the exact sum of the five-decimal 手续费
// cells, rounded half away from zero to the decimals the total is written with.
func TestWechatFeeTotal(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/wechat/all_trades.csv")
	if err != nil {
		t.Fatal(err)
	}
	// The fees sum to 0.77 + 0.00020 − 0.17 + 7.41 = 8.01020.
	text := corruptCell(t, string(b), 1, 3, "手续费", "0.00020")
	tests := []struct{ stated, err string }{
		{"8.01", ""},
		{"8.0102", ""},
		{"8.01020", ""},
		{"8.02", "手续费总金额 stated 8.02, computed 8.01"},
		{"8.0103", "手续费总金额 stated 8.0103, computed 8.0102"},
	}
	for _, tt := range tests {
		_, _, err := parseString(t, "wechat", corruptCell(t, text, 6, 7, "手续费总金额", tt.stated))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("stated %s: %v", tt.stated, err)
		case tt.err != "" && (err == nil || !errors.Is(err, ErrControlTotal) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("stated %s: error %v; want CONTROL_TOTAL with %q", tt.stated, err, tt.err)
		}
	}
	// Half away from zero.
	for _, c := range []struct {
		v    int64
		d    int
		want int64
	}{{8_015000, 2, 8_020000}, {8_014999, 2, 8_010000}, {-8_015000, 2, -8_020000}, {-8_014999, 2, -8_010000}, {123, 6, 123}} {
		if got := roundControl(c.v, c.d); got != c.want {
			t.Errorf("roundControl(%d, %d) = %d; want %d", c.v, c.d, got, c.want)
		}
	}
}
