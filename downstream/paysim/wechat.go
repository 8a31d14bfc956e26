package paysim

import (
	"bytes"
)

// wechatHeader is the WeChat Pay ALL trade bill's 27-column detail header.
var wechatHeader = []string{"交易时间", "公众账号ID", "商户号", "特约商户号", "设备号", "微信订单号", "商户订单号",
	"用户标识", "交易类型", "交易状态", "付款银行", "货币种类", "应结订单金额", "代金券金额", "微信退款单号",
	"商户退款单号", "退款金额", "充值券退款金额", "退款类型", "退款状态", "商品名称", "商户数据包", "手续费", "费率",
	"订单金额", "申请退款金额", "费率备注"}

// wechatSummaryHeader is the ALL bill's summary header.
var wechatSummaryHeader = []string{"总交易单数", "应结订单总金额", "退款总金额", "充值券退款总金额", "手续费总金额",
	"订单总金额", "申请退款总金额"}

// wechatBill renders the ALL trade bill: detail header, detail rows, summary header, summary
// row; every value in detail and summary rows is prefixed with a backtick.
func (s *Server) wechatBill(entries []entry) ([]byte, error) {
	rows := [][]string{wechatHeader}
	var settle, refunds, fees, orders, requested int64
	for _, e := range entries {
		c := e.charge
		cur := c.Currency
		settleAmt, refundAmt, orderAmt := c.AmountMinor, int64(0), c.AmountMinor
		state, refundID, refundNo, refundType, refundState := "SUCCESS", "0", "0", "", ""
		if r := e.refund; r != nil {
			settleAmt, refundAmt, orderAmt = 0, r.AmountMinor, 0
			state, refundID, refundNo, refundType, refundState = "REFUND", r.ID, r.MerchantRefundNo, "ORIGINAL", "SUCCESS"
		}
		fee := s.fee(e)
		settle, refunds, fees, orders, requested = settle+settleAmt, refunds+refundAmt, fees+fee, orders+orderAmt, requested+refundAmt
		rows = append(rows, backticked(
			e.at.Format(stampLayout), s.cfg.WechatAppID, s.cfg.WechatMchID, "", "", c.ID, c.MerchantOrderNo,
			openID(c.Payee), "NATIVE", state, "OTHERS", cur, formatMinor(settleAmt, cur), formatMinor(0, cur),
			refundID, refundNo, formatMinor(refundAmt, cur), formatMinor(0, cur), refundType, refundState,
			c.Description, c.Payee, formatMinor(fee, cur), formatRate(s.cfg.FeeBasisPoints),
			formatMinor(orderAmt, cur), formatMinor(refundAmt, cur), ""))
	}
	rows = append(rows, wechatSummaryHeader, backticked(
		itoa(len(entries)), formatMinor(settle, "CNY"), formatMinor(refunds, "CNY"), formatMinor(0, "CNY"),
		formatMinor(fees, "CNY"), formatMinor(orders, "CNY"), formatMinor(requested, "CNY")))
	var buf bytes.Buffer
	if err := csvRows(&buf, rows); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// backticked prefixes every value with a backtick, as WeChat Pay does so spreadsheets keep long
// numbers as text; an empty value becomes a lone backtick.
func backticked(vals ...string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = "`" + v
	}
	return out
}

// openID is a stable stand-in for the payer's openid.
func openID(payee string) string {
	return "o" + sha256Sum([]byte("openid|" + payee))[:27]
}
