package reconcile

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/idemops/idemops/money"
)

// benchRows is the size of the generated WeChat bill; IDEMOPS_BENCH_ROWS overrides it.
const benchRows = 1_000_000

// maxStreamingHeap is the live heap a parse may hold whatever the file size: one line, the
// reader's buffers, the summary. A parser that collects lines would blow through it.
const maxStreamingHeap = 64 << 20

func benchRowCount(b *testing.B) int {
	if s := os.Getenv("IDEMOPS_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("IDEMOPS_BENCH_ROWS=%q", s)
		}
		return n
	}
	return benchRows
}

const wechatDetailHeader = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注"

// benchFeeBP is the fee the generated bill charges (0.60%, half up to the fen, returned on a
// refund), the schedule BenchmarkReconcile1M checks it against.
const benchFeeBP = 60

// benchFee is a generated line's fee in fen: every 5000th line is charged a fen too much, for a
// trickle of FEE_MISMATCH.
func benchFee(i int, amount int64) int64 {
	fee := (amount*benchFeeBP + 5000) / 10000
	if i%5000 == 4 {
		fee++
	}
	return fee
}

// writeWechatBill writes an n-row WeChat ALL bill (every tenth row a refund, its fee returned)
// with fees and a summary row that agrees with it, so its settlement (应结订单总金额 − 退款总金额
// − 手续费总金额) agrees with the lines' net.
func writeWechatBill(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	fmt.Fprintln(bw, wechatDetailHeader)
	start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	var paid, refunded, fees int64
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i%86400) * time.Second).Format(localTimeLayout)
		amount := int64(100 + i%50000)
		yuan := money.Format(amount, "CNY")
		if i%10 == 9 {
			fee := -benchFee(i, amount)
			refunded += amount
			fees += fee
			fmt.Fprintf(bw, "`%s,`wx2421b1c4370ec43b,`1900000109,`0,`,`42000021562024030%011d,`ORD-%09d,`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`JSAPI,`REFUND,`CMB_CREDIT,`CNY,`0.00,`0.00,`5030050935202403%013d,`RF-%09d,`%s,`0.00,`ORIGINAL,`SUCCESS,`会员月卡,`,`%s,`0.60%%,`0.00,`%s,`\n",
				at, i-1, i-1, i, i, yuan, money.Format(fee, "CNY"), yuan)
			continue
		}
		fee := benchFee(i, amount)
		paid += amount
		fees += fee
		fmt.Fprintf(bw, "`%s,`wx2421b1c4370ec43b,`1900000109,`0,`,`42000021562024030%011d,`ORD-%09d,`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`JSAPI,`SUCCESS,`CMB_CREDIT,`CNY,`%s,`0.00,`0,`0,`0.00,`0.00,`,`,`会员月卡,`,`%s,`0.60%%,`%s,`0.00,`\n",
			at, i, i, yuan, money.Format(fee, "CNY"), yuan)
	}
	fmt.Fprintln(bw, "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额")
	p, r := money.Format(paid, "CNY"), money.Format(refunded, "CNY")
	fmt.Fprintf(bw, "`%d,`%s,`%s,`0.00,`%s,`%s,`%s\n", n, p, r, money.Format(fees, "CNY"), p, r)
	return bw.Flush()
}

// BenchmarkParseWechat1M parses a generated bill of benchRows rows and compares it with the
// baseline of reading the same file with encoding/csv and doing nothing else. It fails if the
// live heap grows past maxStreamingHeap: parsing must stream.
func BenchmarkParseWechat1M(b *testing.B) {
	rows := benchRowCount(b)
	path := filepath.Join(b.TempDir(), "wechat_all.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeWechatBill(f, rows); err != nil {
		b.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(path)
	p, _ := ParserFor("wechat")

	var parseTime, baseTime time.Duration
	var allocBytes uint64
	var peakHeap uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Baseline: encoding/csv reading every record, no normalization.
		t0 := time.Now()
		bf, _ := os.Open(path)
		cr := csv.NewReader(bufio.NewReaderSize(bf, 64<<10))
		cr.FieldsPerRecord = -1
		cr.ReuseRecord = true
		cr.LazyQuotes = true
		n := 0
		for {
			if _, err := cr.Read(); err != nil {
				break
			}
			n++
		}
		bf.Close()
		baseTime += time.Since(t0)
		if n != rows+3 {
			b.Fatalf("baseline read %d records", n)
		}

		runtime.GC()
		var before, during runtime.MemStats
		runtime.ReadMemStats(&before)
		t0 = time.Now()
		pf, _ := os.Open(path)
		seen := 0
		sum, err := p.Parse(context.Background(), pf, func(l StatementLine) error {
			seen++
			if seen%(rows/10+1) == 0 {
				runtime.ReadMemStats(&during)
				peakHeap = max(peakHeap, during.HeapAlloc)
			}
			return nil
		})
		parseTime += time.Since(t0)
		pf.Close()
		if err != nil {
			b.Fatal(err)
		}
		if sum.Lines != rows || !sum.ControlTotalsOK() {
			b.Fatalf("parsed %d of %d lines, control totals %v", sum.Lines, rows, sum.ControlTotalsOK())
		}
		runtime.ReadMemStats(&during)
		allocBytes += during.TotalAlloc - before.TotalAlloc
	}
	b.StopTimer()
	if peakHeap > maxStreamingHeap {
		b.Fatalf("live heap reached %d MiB while parsing: the parser is not streaming", peakHeap>>20)
	}
	n := float64(b.N)
	b.ReportMetric(float64(rows)*n/parseTime.Seconds(), "lines/s")
	b.ReportMetric(float64(rows)*n/baseTime.Seconds(), "baseline-lines/s")
	b.ReportMetric(parseTime.Seconds()/baseTime.Seconds(), "ratio")
	b.ReportMetric(float64(allocBytes)/n/float64(rows), "alloc-B/line")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(st.Size())/(1<<20), "file-MiB")
}
