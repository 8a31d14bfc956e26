package paysim_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/downstream/paysim"
)

var update = flag.Bool("update", false, "rewrite the golden statements in testdata/")

// statementDay is the day of the golden statements. Its charges straddle both the Shanghai
// and the UTC day boundary, so the four formats see different sets.
const statementDay = "2024-03-15"

// goldenWorld plays a fixed script against a seeded paysim with a fixed clock.
func goldenWorld(t *testing.T) *paysim.Server {
	t.Helper()
	clk := &clock{}
	srv, c := start(t, paysim.Config{Seed: 42, Now: clk.Now, DeclinePayees: []string{"blocked"}})
	ctx := context.Background()
	step := func(at string, f func() error) {
		t.Helper()
		clk.Set(at)
		if err := f(); err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
	}
	post := func(key string, req paysim.ChargeRequest, fault string) func() error {
		return func() error { _, err := c.CreateCharge(ctx, key, req, fault); return err }
	}
	refund := func(order, key string, amount int64, reason string) func() error {
		return func() error {
			_, err := c.Refund(ctx, order, key, paysim.RefundRequest{AmountMinor: amount, Reason: reason})
			return err
		}
	}
	// 00:30 in Shanghai on the 15th, still the 14th in UTC.
	step("2024-03-14T16:30:00Z", post("order-a", charge(12345, "CNY", "", "alice", "咖啡, 大杯😀"), ""))
	step("2024-03-15T02:00:00Z", post("order-b", charge(100000, "CNY", "", "bob", "Monthly plan"), ""))
	step("2024-03-15T02:05:00Z", post("order-c", charge(5, "CNY", "", "carol", "sticker"), ""))
	step("2024-03-15T03:00:00Z", post("order-declined", charge(900, "CNY", "", "blocked", "declined"), ""))
	step("2024-03-15T04:00:00Z", refund("order-b", "refund-b-1", 30000, "partial"))
	step("2024-03-15T05:00:00Z", post("order-d", charge(1000, "JPY", "", "dave", "ramen"), ""))
	step("2024-03-15T06:00:00Z", post("order-e", charge(2599, "USD", "", "erin", "book"), ""))
	step("2024-03-15T07:00:00Z", refund("order-e", "refund-e-1", 2599, "returned"))
	step("2024-03-15T08:00:00Z", func() error {
		_, err := c.InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 4200, Currency: "CNY",
			MerchantOrderNo: "order-x", Payee: "mallory", Description: "never recorded"})
		return err
	})
	step("2024-03-15T09:00:00Z", post("", charge(1500, "CNY", "order-g", "gina", "double"), paysim.FaultDoubleCharge))
	// 01:00 on the 16th in Shanghai, still the 15th in UTC.
	step("2024-03-15T17:00:00Z", post("order-f", charge(777, "CNY", "", "frank", "late"), ""))
	clk.Set("2024-03-16T02:00:00Z") // export time
	return srv
}

func TestStatement_GoldenPerFormat(t *testing.T) {
	t.Parallel()
	srv := goldenWorld(t)
	for _, f := range paysim.Formats {
		got, err := srv.Statement(statementDay, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		path := filepath.Join("testdata", "statement_"+statementDay+"."+string(f)+".csv")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update to create it)", f, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s statement differs from %s (go test -update after checking the change):\n%s", f, path, got)
		}
	}
}

func TestStatement_IsByteStableForASeedAndClock(t *testing.T) {
	t.Parallel()
	a, b := goldenWorld(t), goldenWorld(t)
	for _, f := range paysim.Formats {
		x, _ := a.Statement(statementDay, f)
		y, _ := b.Statement(statementDay, f)
		if !bytes.Equal(x, y) {
			t.Errorf("%s: two runs with the same seed and clock differ", f)
		}
	}
}

func readCSV(t *testing.T, b []byte) [][]string {
	t.Helper()
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("csv: %v", err)
	}
	return recs
}

func column(t *testing.T, header []string, name string) int {
	t.Helper()
	for i, h := range header {
		if h == name {
			return i
		}
	}
	t.Fatalf("no column %q in %q", name, header)
	return -1
}

func TestStatement_WechatLayout(t *testing.T) {
	t.Parallel()
	b, err := goldenWorld(t).Statement(statementDay, paysim.FormatWechat)
	if err != nil {
		t.Fatal(err)
	}
	recs := readCSV(t, b)
	if len(recs[0]) != 27 {
		t.Fatalf("detail header has %d columns, want 27", len(recs[0]))
	}
	n := len(recs)
	if strings.Join(recs[n-2], ",") != "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额" {
		t.Fatalf("summary header = %q", recs[n-2])
	}
	details := recs[1 : n-2]
	orders := map[string]bool{}
	for _, row := range details {
		for i, v := range row {
			if !strings.HasPrefix(v, "`") {
				t.Fatalf("column %s = %q lacks the backtick", recs[0][i], v)
			}
		}
		orders[strings.TrimPrefix(row[column(t, recs[0], "商户订单号")], "`")] = true
	}
	// Shanghai day: order-a (00:30) in; order-f (01:00 on the 16th) out; USD/JPY out; the declined out.
	for order, want := range map[string]bool{"order-a": true, "order-b": true, "order-f": false, "order-e": false,
		"order-d": false, "order-declined": false, "order-x": true, "order-g": true} {
		if orders[order] != want {
			t.Errorf("order %s listed = %v, want %v", order, orders[order], want)
		}
	}
	if got := recs[n-1][0]; got != "`"+itoa(len(details)) {
		t.Errorf("总交易单数 = %q, want %d", got, len(details))
	}
	// 12345 + 100000 + 5 + 4200 + 1500 + 1500 settled; 30000 refunded.
	if got := recs[n-1][1]; got != "`1195.50" {
		t.Errorf("应结订单总金额 = %q, want `1195.50", got)
	}
	if got := recs[n-1][2]; got != "`300.00" {
		t.Errorf("退款总金额 = %q, want `300.00", got)
	}
}

func TestStatement_AlipayLayout(t *testing.T) {
	t.Parallel()
	raw, err := goldenWorld(t).Statement(statementDay, paysim.FormatAlipay)
	if err != nil {
		t.Fatal(err)
	}
	utf, err := simplifiedchinese.GBK.NewDecoder().Bytes(raw)
	if err != nil {
		t.Fatalf("not GBK: %v", err)
	}
	if bytes.Contains(raw, []byte("业务明细")) {
		t.Fatal("statement is UTF-8, want GBK")
	}
	var body []string
	var hashes []string
	for _, line := range strings.Split(strings.TrimSuffix(string(utf), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			hashes = append(hashes, line)
		} else {
			body = append(body, line)
		}
	}
	if len(hashes) != 8 || hashes[0] != "#支付宝业务明细查询" {
		t.Fatalf("# lines = %q", hashes)
	}
	if hashes[5] != "#交易合计：6笔，商家实收共1195.50元，商家优惠共0.00元" {
		t.Errorf("trade total line = %q", hashes[5])
	}
	if hashes[6] != "#退款合计：1笔，商家实收退款共-300.00元，商家优惠退款共0.00元" {
		t.Errorf("refund total line = %q", hashes[6])
	}
	recs := readCSV(t, []byte(strings.Join(body, "\n")))
	h := recs[0]
	if len(h) != 25 || h[11] != "订单金额（元）" {
		t.Fatalf("header = %q", h)
	}
	for _, row := range recs[1:] {
		if !strings.HasSuffix(row[0], "\t") || !strings.HasSuffix(row[1], "\t") {
			t.Errorf("IDs lack the trailing TAB: %q %q", row[0], row[1])
		}
		if row[column(t, h, "业务类型")] == "退款" {
			if !strings.HasPrefix(row[column(t, h, "商家实收（元）")], "-") {
				t.Errorf("refund not negative: %q", row)
			}
			if row[column(t, h, "退款批次号/请求号")] != "refund-b-1\t" {
				t.Errorf("refund number = %q", row[column(t, h, "退款批次号/请求号")])
			}
		}
	}
	if !strings.Contains(string(utf), "咖啡, 大杯?") {
		t.Error("a character GBK cannot hold was not replaced by '?'")
	}
}

func TestStatement_StripeLayout(t *testing.T) {
	t.Parallel()
	b, err := goldenWorld(t).Statement(statementDay, paysim.FormatStripe)
	if err != nil {
		t.Fatal(err)
	}
	recs := readCSV(t, b)
	h := recs[0]
	byOrder := map[string][]string{}
	for _, row := range recs[1:] {
		key := row[column(t, h, "payment_metadata[order_no]")] + "/" + row[column(t, h, "reporting_category")]
		byOrder[key] = row
	}
	for key, want := range map[string][2]string{
		"order-b/charge": {"cny", "1000.00"}, "order-b/refund": {"cny", "-300.00"},
		"order-d/charge": {"jpy", "1000"}, "order-e/refund": {"usd", "-25.99"}, "order-f/charge": {"cny", "7.77"},
	} {
		row, ok := byOrder[key]
		if !ok {
			t.Errorf("no row %s", key)
			continue
		}
		if got := [2]string{row[column(t, h, "currency")], row[column(t, h, "gross")]}; got != want {
			t.Errorf("%s: currency, gross = %q, want %q", key, got, want)
		}
	}
	if _, ok := byOrder["order-a/charge"]; ok {
		t.Error("order-a belongs to the 14th in UTC")
	}
}

func TestStatement_AdyenLayout(t *testing.T) {
	t.Parallel()
	b, err := goldenWorld(t).Statement(statementDay, paysim.FormatAdyen)
	if err != nil {
		t.Fatal(err)
	}
	recs := readCSV(t, b)
	h := recs[0]
	typ, cur := column(t, h, "Type"), column(t, h, "Net Currency")
	payout := map[string]string{}
	types := map[string]int{}
	for _, row := range recs[1:] {
		types[row[typ]]++
		if row[typ] == "MerchantPayout" {
			payout[row[cur]] = row[column(t, h, "Net Debit (NC)")] + "/" + row[column(t, h, "Net Credit (NC)")]
		}
	}
	if types["Settled"] != 8 || types["Refunded"] != 2 || types["MerchantPayout"] != 3 {
		t.Errorf("types = %v", types)
	}
	// CNY: (100000-600) + (5-0) + (4200-25) + 2×(1500-9) + (777-5) − 30000 = 77334 paid out;
	// USD: 2599-16 settled, 2599 refunded (the fee is not returned): 16 owed by the merchant.
	if payout["CNY"] != "773.34/" || payout["USD"] != "/0.16" || payout["JPY"] != "994/" {
		t.Errorf("payouts = %v", payout)
	}
}

func TestStatement_RejectsBadDateAndFormat(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	ctx := context.Background()
	for _, tc := range []struct{ date, format string }{{"2024-13-01", "wechat"}, {"20240301", "stripe"}, {"2024-03-01", "paypal"}} {
		_, err := c.Statement(ctx, tc.date, paysim.Format(tc.format))
		if err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("%s %s: err = %v, want a 400", tc.date, tc.format, err)
		}
	}
}
