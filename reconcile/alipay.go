package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/idemops/idemops/money"
)

// alipayParser reads Alipay's 业务明细 (trade detail) file: GBK CSV framed by `#` preamble and
// footer lines. The footer's 交易合计 and 退款合计 lines are the control totals. ID cells carry a
// trailing TAB; refunds are rows of 业务类型 退款 with negative amounts; times are Asia/Shanghai.
type alipayParser struct{ opts options }

func (alipayParser) Format() string { return "alipay" }

var alipayStatuses = map[string]Status{
	"交易": StatusSuccess,
	"退款": StatusRefund,
}

// The footer totals: `#交易合计：N笔，商家实收共X元，…` and `#退款合计：N笔，商家实收退款共-Y元，…`.
// Amounts may be written with grouping commas.
var (
	alipayTradeFooter  = regexp.MustCompile(`^#交易合计[：:]\s*(\d+)\s*笔[，,]\s*商家实收共\s*([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)\s*元(?:[，,]\s*商家优惠共\s*([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)\s*元)?`)
	alipayRefundFooter = regexp.MustCompile(`^#退款合计[：:]\s*(\d+)\s*笔[，,]\s*商家实收退款共\s*([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)\s*元(?:[，,]\s*商家优惠退款共\s*([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)\s*元)?`)
)

// alipayValue trims the padding and the trailing TAB Alipay appends to ID cells.
func alipayValue(s string) string { return strings.TrimSpace(s) }

type alipayColumns struct {
	txn, order, kind, created, finished, amount int
	money                                       []moneyColumn
	// ordered is 订单金额 (the amount we asked for), fee 服务费 (written negative); -1 if absent.
	ordered, fee int
	discount     int // 商家优惠（元）, summed for the footer; -1 if absent
}

func alipayDetailColumns(h *header) (c alipayColumns, err error) {
	for _, step := range []struct {
		dst   *int
		names []string
	}{
		{&c.txn, []string{"支付宝交易号"}},
		{&c.order, []string{"商户订单号"}},
		{&c.kind, []string{"业务类型"}},
		{&c.created, []string{"创建时间"}},
		// 商家实收 is what the merchant received (refunds negative) and what the footer sums;
		// the line's amount is 订单金额 for a trade (merchant discounts lower 商家实收, not
		// the amount we asked for) and 商家实收 for a refund (its 订单金额 is the original order's).
		{&c.amount, []string{"商家实收（元）"}},
	} {
		if *step.dst, err = h.need(step.names...); err != nil {
			return c, err
		}
	}
	c.finished = h.col("完成时间")
	c.money = alipayMoneyColumns(h)
	c.ordered = h.col("订单金额（元）")
	c.fee = h.col("服务费（元）")
	c.discount = h.col("商家优惠（元）")
	return c, nil
}

// alipayTotals is one footer line: a count and a sum at controlScale.
type alipayTotals struct {
	line  int
	count int
	sum   int64
	// discount is 商家优惠 (the footer's 商家优惠共/商家优惠退款共); hasDiscount is false when
	// the footer does not state it.
	discount    int64
	hasDiscount bool
}

func (p alipayParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	rr, err := newRecordReader(r, p.opts, readerConfig{encoding: encodingGBK, comma: ',', comment: "#"})
	if err != nil {
		return nil, err
	}
	sink := newSink(ctx, fn, p.Format())
	sum := sink.sum
	defer func() { sum.Bytes = rr.bytesRead() }()

	// Preamble, then the header.
	var rec record
	for {
		rec, err = rr.next()
		if errors.Is(err, io.EOF) {
			return sum, lineErrorf(rr.line+1, "no detail header: the statement has only `#` lines or nothing")
		}
		if err != nil {
			return sum, err
		}
		if !rec.comment {
			break
		}
	}
	h := newHeader(rec)
	sum.Header = h.names
	cols, err := alipayDetailColumns(h)
	if err != nil {
		return sum, err
	}

	var (
		computed             = map[Status]*alipayTotals{StatusSuccess: {}, StatusRefund: {}}
		trade, refund        *alipayTotals
		inFooter             bool
		footerStart, lastRow int
		book                 = newSettlementBook()
	)
	for {
		rec, err = rr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, err
		}
		if rec.comment {
			if !inFooter {
				inFooter, footerStart = true, rec.line
			}
			var t **alipayTotals
			var re *regexp.Regexp
			var label string
			switch {
			case strings.HasPrefix(rec.text, "#交易合计"):
				t, re, label = &trade, alipayTradeFooter, "#交易合计"
			case strings.HasPrefix(rec.text, "#退款合计"):
				t, re, label = &refund, alipayRefundFooter, "#退款合计"
			default:
				continue
			}
			if *t != nil {
				return sum, lineErrorf(rec.line, "a second %s line (the first is line %d)", label, (*t).line)
			}
			m := re.FindStringSubmatch(rec.text)
			if m == nil {
				return sum, lineErrorf(rec.line, "footer line does not read as `%s`", re.String())
			}
			n, err := strconv.Atoi(m[1])
			if err != nil {
				return sum, lineErrorf(rec.line, "footer count %q: %v", m[1], err)
			}
			amount, err := parseControl(m[2], ',')
			if err != nil {
				return sum, lineErrorf(rec.line, "footer amount: %v", err)
			}
			*t = &alipayTotals{line: rec.line, count: n, sum: amount}
			if m[3] != "" {
				if (*t).discount, err = parseControl(m[3], ','); err != nil {
					return sum, lineErrorf(rec.line, "footer 商家优惠: %v", err)
				}
				(*t).hasDiscount = true
			}
			continue
		}
		if inFooter {
			return sum, lineErrorf(rec.line, "a detail row after the footer began on line %d", footerStart)
		}
		if err := sink.row(); err != nil {
			return sum, err
		}
		if err := h.checkWidth(rec); err != nil {
			return sum, err
		}
		lastRow = rec.line
		if err := checkMoney(rec, h, cols.money, 2, ',', alipayValue); err != nil {
			return sum, err
		}
		var line StatementLine
		var raw int64
		if line, raw, err = cols.line(rec, h); err != nil {
			return sum, err
		}
		c := computed[line.Status]
		c.count++
		var ok bool
		if c.sum, ok = addChecked(c.sum, raw); !ok {
			return sum, lineErrorf(rec.line, "%s: the column total overflows", h.names[cols.amount])
		}
		if cols.discount >= 0 {
			d, err := parseControl(alipayValue(rec.fields[cols.discount]), ',')
			if err != nil && alipayValue(rec.fields[cols.discount]) != "" {
				return sum, lineErrorf(rec.line, "%s: %v", h.names[cols.discount], err)
			}
			if c.discount, ok = addChecked(c.discount, d); !ok {
				return sum, lineErrorf(rec.line, "%s: the column total overflows", h.names[cols.discount])
			}
		}
		line.Raw = rec.text
		if err := book.line(alipayBillGroup, line.Currency, line.NetMinor, line.FeeMinor, rec.line); err != nil {
			return sum, err
		}
		if err := sink.emit(line); err != nil {
			return sum, err
		}
	}
	if trade == nil || refund == nil {
		missing := "#交易合计"
		if trade != nil {
			missing = "#退款合计"
		}
		return sum, lineErrorf(max(rr.line, lastRow), "no %s footer line: truncated?", missing)
	}
	ct := &ControlTotals{Line: trade.line, Source: "footer"}
	ct.addCount("交易合计/笔", trade.count, computed[StatusSuccess].count)
	ct.addAmount("交易合计/商家实收", trade.sum, computed[StatusSuccess].sum)
	ct.addCount("退款合计/笔", refund.count, computed[StatusRefund].count)
	ct.addAmount("退款合计/商家实收退款", refund.sum, computed[StatusRefund].sum)
	if cols.discount >= 0 {
		if trade.hasDiscount {
			ct.addAmount("交易合计/商家优惠", trade.discount, computed[StatusSuccess].discount)
		}
		if refund.hasDiscount {
			ct.addAmount("退款合计/商家优惠退款", refund.discount, computed[StatusRefund].discount)
		}
	}
	sum.Control = ct
	if !ct.OK() {
		return sum, &ControlTotalError{Totals: ct}
	}
	if p.opts.summary != nil {
		if err := p.parseSummary(p.opts.summary, book); err != nil {
			return sum, err
		}
		if sum.Settlements, err = book.settlements(); err != nil {
			return sum, fmt.Errorf("%w: 汇总: %v", ErrMalformed, err)
		}
	}
	return sum, nil
}

// alipayBillGroup is the settlement group of an Alipay bill: the bill's day as a whole.
const alipayBillGroup = "bill"

// alipaySummaryNet is the column of the 汇总 file that states what was settled: 商家实收 plus
// the (negative) 服务费, per store and on the 合计 row.
const alipaySummaryNet = "实收净额（元）"

// parseSummary reads the 业务明细(汇总) file that comes with the detail in Alipay's bill zip:
// GBK, `#` preamble and footer, the header `门店编号,门店名称,交易订单总笔数,退款订单总笔数,
// 订单金额（元）,商家实收（元）,…,服务费（元）,分润（元）,实收净额（元）`, a row per store and a
// 合计 row. The 合计 row's 实收净额 is the day's settlement in CNY (without a 合计 row: the sum of
// the store rows). Errors name the summary file's line: `汇总 line N: reason`.
func (p alipayParser) parseSummary(r io.Reader, book *settlementBook) error {
	rr, err := newRecordReader(r, p.opts, readerConfig{encoding: encodingGBK, comma: ',', comment: "#"})
	if err != nil {
		return summaryError(err)
	}
	var h *header
	net := -1
	var total, stores SubMinor
	totalLine, lastLine := 0, 0
	for {
		rec, err := rr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return summaryError(err)
		}
		if rec.comment {
			continue
		}
		if h == nil {
			h = newHeader(rec)
			if net, err = h.need(alipaySummaryNet); err != nil {
				return summaryError(err)
			}
			continue
		}
		if err := h.checkWidth(rec); err != nil {
			return summaryError(err)
		}
		if err := checkMoney(rec, h, alipayMoneyColumns(h), 2, ',', alipayValue); err != nil {
			return summaryError(err)
		}
		v, err := subMinorCell(alipayValue(rec.fields[net]), 2, ',')
		if err != nil {
			return summaryError(lineErrorf(rec.line, "%s: %v", h.names[net], err))
		}
		lastLine = rec.line
		if alipayValue(rec.fields[0]) == "合计" {
			if totalLine != 0 {
				return summaryError(lineErrorf(rec.line, "a second 合计 row (the first is line %d)", totalLine))
			}
			total, totalLine = v, rec.line
			continue
		}
		var ok bool
		if stores, ok = addSub(stores, v); !ok {
			return summaryError(lineErrorf(rec.line, "%s: the total overflows", h.names[net]))
		}
	}
	switch {
	case h == nil:
		return summaryError(lineErrorf(rr.line+1, "no header row"))
	case totalLine != 0:
		return book.state(alipayBillGroup, "CNY", "", total, "汇总 合计: "+alipaySummaryNet, totalLine)
	case lastLine != 0:
		return book.state(alipayBillGroup, "CNY", "", stores, "汇总: the stores' "+alipaySummaryNet, lastLine)
	}
	return summaryError(lineErrorf(rr.line, "no 合计 row and no store rows"))
}

// summaryError marks an error as the summary file's, not the detail's: `汇总 line N: reason`.
func summaryError(err error) error {
	var le *LineError
	if errors.As(err, &le) {
		return &LineError{Line: le.Line, Reason: le.Reason, Err: le.Err, File: "汇总", Why: le.Why}
	}
	return err
}

// line normalizes one detail row; raw is its amount at controlScale for the footer check.
func (c alipayColumns) line(rec record, h *header) (l StatementLine, raw int64, err error) {
	f := rec.fields
	l = StatementLine{
		LineNo:          rec.line,
		ChannelTxnID:    alipayValue(f[c.txn]),
		MerchantOrderNo: alipayValue(f[c.order]),
		Currency:        "CNY",
	}
	kind := alipayValue(f[c.kind])
	st, ok := alipayStatuses[kind]
	if !ok {
		return l, 0, lineErrorf(rec.line, "业务类型: unknown value %q", kind)
	}
	l.Status = st
	text := alipayValue(f[c.amount])
	const thousands = ','
	if l.AmountMinor, err = money.ParseScaled(text, 2, thousands); err != nil {
		return l, 0, lineErrorf(rec.line, "%s: %v", h.names[c.amount], err)
	}
	if raw, err = parseControl(text, thousands); err != nil {
		return l, 0, lineErrorf(rec.line, "%s: %v", h.names[c.amount], err)
	}
	received, err := subMinorCell(text, 2, thousands)
	if err != nil {
		return l, 0, lineErrorf(rec.line, "%s: %v", h.names[c.amount], err)
	}
	if st == StatusSuccess && c.ordered >= 0 {
		if l.AmountMinor, err = money.ParseScaled(alipayValue(f[c.ordered]), 2, thousands); err != nil {
			return l, 0, lineErrorf(rec.line, "%s: %v", h.names[c.ordered], err)
		}
	}
	if c.fee >= 0 {
		charged, err := subMinorCell(alipayValue(f[c.fee]), 2, thousands)
		if err != nil {
			return l, 0, lineErrorf(rec.line, "%s: %v", h.names[c.fee], err)
		}
		l.FeeMinor = -charged // Alipay writes the fee it takes as a negative 服务费
	}
	if l.NetMinor, err = netOf(received, l.FeeMinor); err != nil {
		return l, 0, lineErrorf(rec.line, "%v", err)
	}
	at := c.created
	if c.finished >= 0 && alipayValue(f[c.finished]) != "" {
		at = c.finished // when the payment or refund completed
	}
	if l.OccurredAt, err = parseLocalTime(alipayValue(f[at]), localTimeLayout, shanghai); err != nil {
		return l, 0, lineErrorf(rec.line, "%s: %v", h.names[at], err)
	}
	return l, raw, nil
}
