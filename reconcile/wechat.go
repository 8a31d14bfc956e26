package reconcile

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/idemops/idemops/money"
)

// wechatParser reads a WeChat Pay trade bill of type ALL (交易账单): UTF-8 CSV, detail header,
// detail rows, then a summary header and one summary row holding the control totals. Every
// value carries a backtick prefix; amounts are yuan; times are Asia/Shanghai wall clock.
type wechatParser struct{ opts options }

func (wechatParser) Format() string { return "wechat" }

var wechatStatuses = map[string]Status{
	"SUCCESS":    StatusSuccess,
	"REFUND":     StatusRefund,
	"REVOKED":    StatusFailed,
	"CLOSED":     StatusFailed,
	"NOTPAY":     StatusFailed,
	"PAYERROR":   StatusFailed,
	"USERPAYING": StatusFailed,
}

// wechatSummaryCount is the first column of the summary header; it tells the summary apart
// from detail rows.
const wechatSummaryCount = "总交易单数"

// wechatControls pairs each money total of the summary row with the detail column it sums.
// 手续费 cells carry up to five decimals: the sum is exact, and compared with 手续费总金额
// rounded (half away from zero) to as many decimals as the total is written with.
var wechatControls = []struct {
	total   string
	column  []string
	rounded bool
}{
	{"应结订单总金额", []string{"应结订单金额"}, false},
	{"退款总金额", []string{"退款金额"}, false},
	{"充值券退款总金额", []string{"充值券退款金额"}, false},
	{"手续费总金额", []string{"手续费"}, true},
	{"订单总金额", []string{"订单金额"}, false},
	{"申请退款总金额", []string{"申请退款金额"}, false},
	// the older layout's names
	{"总交易额", []string{"总金额", "应结订单金额"}, false},
	{"总退款金额", []string{"退款金额"}, false},
	{"总代金券或立减优惠退款金额", []string{"代金券或立减优惠退款金额"}, false},
}

// wechatValue strips the backtick WeChat puts in front of every value.
func wechatValue(s string) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "`"))
}

type wechatColumns struct {
	time, txn, order, status, currency, amount, refund int
	controls                                           []int // detail column per wechatControls entry, -1 if absent
	money                                              []moneyColumn
	// fee is 手续费; settle (应结订单金额) and paid (退款金额) are what the channel settles for a
	// payment and pays back for a refund: net = settle − fee, or −paid − fee.
	fee, settle, paid int
}

func wechatDetailColumns(h *header) (c wechatColumns, err error) {
	for _, step := range []struct {
		dst   *int
		names []string
	}{
		{&c.time, []string{"交易时间"}},
		{&c.txn, []string{"微信订单号"}},
		{&c.order, []string{"商户订单号"}},
		{&c.status, []string{"交易状态"}},
		// The amount we asked for: 订单金额 in the current layout, 应结订单金额 (older: 总金额)
		// where it is missing.
		{&c.amount, []string{"订单金额", "应结订单金额", "总金额"}},
	} {
		if *step.dst, err = h.need(step.names...); err != nil {
			return c, err
		}
	}
	// The refund columns are missing in the oldest layout; a REFUND row there fails.
	c.refund = h.col("申请退款金额", "退款金额")
	c.currency = h.col("货币种类")
	c.money = moneyColumns(h, wechatMoneyNames, wechatFeeNames)
	c.fee = h.col("手续费")
	c.settle = h.col("应结订单金额", "总金额")
	c.paid = h.col("退款金额", "申请退款金额")
	c.controls = make([]int, len(wechatControls))
	for i, ctl := range wechatControls {
		c.controls[i] = h.col(ctl.column...)
	}
	return c, nil
}

func (p wechatParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	rr, err := newRecordReader(r, p.opts, readerConfig{encoding: encodingUTF8, comma: ','})
	if err != nil {
		return nil, err
	}
	sink := newSink(ctx, fn, p.Format())
	sum := sink.sum
	defer func() { sum.Bytes = rr.bytesRead() }()

	rec, err := rr.next()
	if errors.Is(err, io.EOF) {
		return sum, lineErrorf(rr.line+1, "empty statement: no detail header")
	}
	if err != nil {
		return sum, err
	}
	h := newHeader(rec)
	sum.Header = h.names
	cols, err := wechatDetailColumns(h)
	if err != nil {
		return sum, err
	}

	rows := 0
	sums := make([]int64, len(wechatControls))
	book := newSettlementBook()
	for {
		rec, err = rr.next()
		if errors.Is(err, io.EOF) {
			return sum, lineErrorf(rr.line, "the statement ends without the summary (no %s header): truncated?", wechatSummaryCount)
		}
		if err != nil {
			return sum, err
		}
		if wechatValue(rec.fields[0]) == wechatSummaryCount {
			break
		}
		if err := sink.row(); err != nil {
			return sum, err
		}
		if err := h.checkWidth(rec); err != nil {
			return sum, err
		}
		rows++
		exp, err := cellExponent(rec, h, cols.currency, wechatValue)
		if err != nil {
			return sum, err
		}
		if err := checkMoney(rec, h, cols.money, exp, 0, wechatValue); err != nil {
			return sum, err
		}
		for i, col := range cols.controls {
			if col < 0 {
				continue
			}
			v, err := parseControl(wechatValue(rec.fields[col]), 0)
			if err != nil {
				return sum, lineErrorf(rec.line, "%s: %v", h.names[col], err)
			}
			var ok bool
			if sums[i], ok = addChecked(sums[i], v); !ok {
				return sum, lineErrorf(rec.line, "%s: the column total overflows", h.names[col])
			}
		}
		var line StatementLine
		if line, err = cols.line(rec, h); err != nil {
			return sum, err
		}
		line.Raw = rec.text
		if err := book.line(wechatBillGroup, line.Currency, line.NetMinor, line.FeeMinor, rec.line); err != nil {
			return sum, err
		}
		if err := sink.emit(line); err != nil {
			return sum, err
		}
	}

	sh := newHeader(rec)
	srow, err := rr.next()
	if errors.Is(err, io.EOF) {
		return sum, lineErrorf(rr.line, "summary header without a summary row")
	}
	if err != nil {
		return sum, err
	}
	if err := sh.checkWidth(srow); err != nil {
		return sum, err
	}
	ct := &ControlTotals{Line: srow.line, Source: "summary row"}
	stated, err := strconv.Atoi(wechatValue(srow.fields[0]))
	if err != nil || stated < 0 {
		return sum, lineErrorf(srow.line, "%s: not a count: %q", wechatSummaryCount, srow.fields[0])
	}
	ct.addCount(wechatSummaryCount, stated, rows)
	for i, ctl := range wechatControls {
		col := sh.col(ctl.total)
		if col < 0 || cols.controls[i] < 0 {
			continue
		}
		text := wechatValue(srow.fields[col])
		v, err := parseControl(text, 0)
		if err != nil {
			return sum, lineErrorf(srow.line, "%s: %v", sh.names[col], err)
		}
		computed := sums[i]
		if ctl.rounded {
			decimals := 0
			if _, frac, ok := strings.Cut(text, "."); ok {
				decimals = len(frac)
			}
			computed = roundControl(computed, decimals)
		}
		ct.addAmount(ctl.total, v, computed)
	}
	if extra, err := rr.next(); err == nil {
		return sum, lineErrorf(extra.line, "unexpected content after the summary row")
	} else if !errors.Is(err, io.EOF) {
		return sum, err
	}
	sum.Control = ct
	if !ct.OK() {
		return sum, &ControlTotalError{Totals: ct}
	}
	if err := wechatSettlement(book, sh, srow); err != nil {
		return sum, err
	}
	if sum.Settlements, err = book.settlements(); err != nil {
		return sum, lineErrorf(srow.line, "%v", err)
	}
	return sum, nil
}

// wechatBillGroup is the settlement group of a WeChat Pay bill: the bill's day as a whole.
const wechatBillGroup = "bill"

// wechatSettlement states the bill's settlement from its summary row: 应结订单总金额 − 退款总金额
// − 手续费总金额 (older layout: 总交易额 − 总退款金额 − 手续费总金额), in the one currency of its
// lines (CNY when it has none). The fee total is rounded as it is written (five decimals in the
// current layout, two in older ones), so the rows' fees are summed exactly and rounded the same
// way before they are compared. A bill with lines in several currencies states no settlement
// its summary could attribute.
func wechatSettlement(book *settlementBook, sh *header, srow record) error {
	currency := "CNY"
	if len(book.groups) > 1 {
		return nil
	}
	for k := range book.groups {
		currency = k.currency
	}
	exp := currencyExponent(currency)
	settled, refunded, fees := sh.col("应结订单总金额", "总交易额"), sh.col("退款总金额", "总退款金额"), sh.col("手续费总金额")
	if settled < 0 {
		return nil
	}
	var stated SubMinor
	source := sh.names[settled]
	feeDecimals := -1
	for i, col := range []int{settled, refunded, fees} {
		if col < 0 {
			continue
		}
		text := wechatValue(srow.fields[col])
		v, err := subMinorCell(text, exp, 0)
		if err != nil {
			return lineErrorf(srow.line, "%s: %v", sh.names[col], err)
		}
		if i > 0 {
			v = -v
			source += " − " + sh.names[col]
		}
		var ok bool
		if stated, ok = addSub(stated, v); !ok {
			return lineErrorf(srow.line, "%s: the settlement overflows", sh.names[col])
		}
		if col == fees {
			feeDecimals = 0
			if _, frac, ok := strings.Cut(text, "."); ok {
				feeDecimals = len(frac)
			}
		}
	}
	if err := book.state(wechatBillGroup, currency, "", stated, "summary row: "+source, srow.line); err != nil {
		return err
	}
	book.get(wechatBillGroup, currency).feeDecimals = feeDecimals
	return nil
}

func (c wechatColumns) line(rec record, h *header) (StatementLine, error) {
	f := rec.fields
	l := StatementLine{
		LineNo:          rec.line,
		ChannelTxnID:    wechatValue(f[c.txn]),
		MerchantOrderNo: wechatValue(f[c.order]),
		Currency:        "CNY",
	}
	state := wechatValue(f[c.status])
	st, ok := wechatStatuses[state]
	if !ok {
		return l, lineErrorf(rec.line, "交易状态: unknown value %q", state)
	}
	l.Status = st
	if c.currency >= 0 {
		cur, err := money.Normalize(wechatValue(f[c.currency]))
		if err != nil {
			return l, lineErrorf(rec.line, "%s: %v", h.names[c.currency], err)
		}
		l.Currency = cur
	}
	col := c.amount
	if st == StatusRefund {
		if col = c.refund; col < 0 {
			return l, lineErrorf(rec.line, "a REFUND row, but the header has no 退款金额 column")
		}
	}
	exp, _ := money.Exponent(l.Currency)
	amount, err := money.ParseScaled(wechatValue(f[col]), exp, 0)
	if err != nil {
		return l, lineErrorf(rec.line, "%s: %v", h.names[col], err)
	}
	if st == StatusRefund {
		// WeChat writes refund amounts as positive numbers in the refund columns.
		if amount <= 0 {
			return l, lineErrorf(rec.line, "%s: a REFUND row needs a positive refund amount, got %q", h.names[col], wechatValue(f[col]))
		}
		amount = -amount
	}
	l.AmountMinor = amount
	if c.fee >= 0 {
		if l.FeeMinor, err = subMinorCell(wechatValue(f[c.fee]), exp, 0); err != nil {
			return l, lineErrorf(rec.line, "%s: %v", h.names[c.fee], err)
		}
	}
	col = c.settle
	if st == StatusRefund {
		col = c.paid
	}
	var settled SubMinor
	if col >= 0 {
		if settled, err = subMinorCell(wechatValue(f[col]), exp, 0); err != nil {
			return l, lineErrorf(rec.line, "%s: %v", h.names[col], err)
		}
	}
	if st == StatusRefund {
		settled = -settled
	}
	if st == StatusFailed {
		settled = 0
	}
	if l.NetMinor, err = netOf(settled, l.FeeMinor); err != nil {
		return l, lineErrorf(rec.line, "%v", err)
	}
	if l.OccurredAt, err = parseLocalTime(wechatValue(f[c.time]), localTimeLayout, shanghai); err != nil {
		return l, lineErrorf(rec.line, "%s: %v", h.names[c.time], err)
	}
	return l, nil
}

// roundControl rounds a controlScale value to decimals, half away from zero.
func roundControl(v int64, decimals int) int64 {
	if decimals >= controlScale {
		return v
	}
	unit := int64(1)
	for i := decimals; i < controlScale; i++ {
		unit *= 10
	}
	q, r := v/unit, v%unit
	if r < 0 {
		r = -r
	}
	if 2*r >= unit {
		if v < 0 {
			q--
		} else {
			q++
		}
	}
	return q * unit
}
