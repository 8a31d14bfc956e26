package paysim

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// alipayHeader is the 业务明细 header (25 columns; note the full-width parentheses).
var alipayHeader = []string{"支付宝交易号", "商户订单号", "业务类型", "商品名称", "创建时间", "完成时间", "门店编号",
	"门店名称", "操作员", "终端号", "对方账户", "订单金额（元）", "商家实收（元）", "支付宝红包（元）", "集分宝（元）",
	"支付宝优惠（元）", "商家优惠（元）", "券核销金额（元）", "券名称", "商家红包消费金额（元）", "卡消费金额（元）",
	"退款批次号/请求号", "服务费（元）", "分润（元）", "备注"}

const alipayDateLayout = "2006年01月02日 15:04:05"

// alipayDetail renders 业务明细 in GBK: `#` preamble, header, rows (IDs with a trailing TAB,
// refunds negative with 业务类型 退款, the service fee negative on trades), `#` footer with
// the trade and refund totals.
func (s *Server) alipayDetail(d day, entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "#支付宝业务明细查询\n")
	fmt.Fprintf(&buf, "#账号：[%s]\n", s.cfg.AlipayPID)
	fmt.Fprintf(&buf, "#起始日期：[%s]   终止日期：[%s]\n", d.start.Format(alipayDateLayout), d.end.Format(alipayDateLayout))
	fmt.Fprintf(&buf, "#-----------------------------------------业务明细列表----------------------------------------\n")

	rows := [][]string{alipayHeader}
	var trades, refunds int
	var tradeSum, refundSum int64
	zero := formatMinor(0, "CNY")
	for _, e := range entries {
		c := e.charge
		kind, amount, fee, batch := "交易", c.AmountMinor, -s.fee(e), ""
		if r := e.refund; r != nil {
			kind, amount, batch = "退款", -r.AmountMinor, r.MerchantRefundNo+"\t"
			refunds++
			refundSum += amount
		} else {
			trades++
			tradeSum += amount
		}
		at := e.at.Format(stampLayout)
		rows = append(rows, []string{
			c.ID + "\t", c.MerchantOrderNo + "\t", kind, gbkSafe(c.Description), at, at, "", "", "", "",
			gbkSafe(c.Payee), formatMinor(amount, "CNY"), formatMinor(amount, "CNY"), zero, zero, zero, zero, zero,
			"", zero, zero, batch, formatMinor(fee, "CNY"), zero, "",
		})
	}
	if err := csvRows(&buf, rows); err != nil {
		return nil, err
	}
	fmt.Fprintf(&buf, "#-----------------------------------------业务明细列表结束------------------------------------\n")
	fmt.Fprintf(&buf, "#交易合计：%d笔，商家实收共%s元，商家优惠共%s元\n", trades, formatMinor(tradeSum, "CNY"), zero)
	fmt.Fprintf(&buf, "#退款合计：%d笔，商家实收退款共%s元，商家优惠退款共%s元\n", refunds, formatMinor(refundSum, "CNY"), zero)
	fmt.Fprintf(&buf, "#导出时间：[%s]\n", s.cfg.Now().In(Shanghai).Format(alipayDateLayout))

	out, err := simplifiedchinese.GBK.NewEncoder().Bytes(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("alipay statement: encode GBK: %w", err)
	}
	return out, nil
}

// gbkSafe replaces the characters GBK cannot hold with '?', so free text never breaks the
// encoding of a whole statement.
func gbkSafe(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	enc := simplifiedchinese.GBK.NewEncoder()
	var b strings.Builder
	for _, r := range s {
		if _, err := enc.String(string(r)); err != nil {
			b.WriteByte('?')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
