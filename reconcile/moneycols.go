package reconcile

import (
	"errors"
	"math"
	"strings"

	"github.com/idemops/idemops/money"
)

// Every money column of every detail row is parsed, whether the parser uses it or not: a bill
// whose unused column is corrupt (an Alipay 订单金额 of `105.0.0` next to a good 商家实收) is a
// corrupt bill and fails with `line N: <column>: reason`, nothing imported.

// feeExtraDecimals is how many decimals beyond the currency's exponent a fee column may carry:
// WeChat Pay's 手续费 has five decimals for CNY. Fees are held at this precision (see SubMinor).
const feeExtraDecimals = 3

// moneyColumn is one money column of a header: its index and the decimals beyond the currency's
// exponent it may carry (0, or feeExtraDecimals for fee columns).
type moneyColumn struct {
	col   int
	extra int
}

// moneyColumns returns the columns of h named in amounts (at the currency's precision) and in
// fees (at fee precision), in header order of the lists; absent names are left out.
func moneyColumns(h *header, amounts, fees []string) []moneyColumn {
	var out []moneyColumn
	for _, n := range amounts {
		if i := h.col(n); i >= 0 {
			out = append(out, moneyColumn{col: i})
		}
	}
	for _, n := range fees {
		if i := h.col(n); i >= 0 {
			out = append(out, moneyColumn{col: i, extra: feeExtraDecimals})
		}
	}
	return out
}

// checkMoney parses every non-empty cell of cols at exp (+ the column's extra decimals);
// thousands is the grouping separator the format writes (0 for none). clean strips the format's
// decoration from a cell.
func checkMoney(rec record, h *header, cols []moneyColumn, exp int, thousands byte, clean func(string) string) error {
	for _, c := range cols {
		s := clean(rec.fields[c.col])
		if s == "" {
			continue
		}
		if _, err := money.ParseScaled(s, exp+c.extra, thousands); err != nil {
			return lineErrorf(rec.line, "%s: %v", h.names[c.col], err)
		}
	}
	return nil
}

// cellExponent is the exponent of the currency in cell i for checking the money columns that
// are in it: an unknown currency fails the row; an empty or absent one checks the syntax at the
// largest ISO 4217 exponent.
func cellExponent(rec record, h *header, i int, clean func(string) string) (int, error) {
	if i < 0 {
		return 3, nil
	}
	s := clean(rec.fields[i])
	if s == "" {
		return 3, nil
	}
	cur, err := money.Normalize(s)
	if err != nil {
		return 0, lineErrorf(rec.line, "%s: %v", h.names[i], err)
	}
	exp, _ := money.Exponent(cur)
	return exp, nil
}

// alipayMoneyColumns: every column Alipay labels in yuan, （元）.
func alipayMoneyColumns(h *header) []moneyColumn {
	var out []moneyColumn
	for i, n := range h.names {
		if strings.HasSuffix(strings.TrimSpace(n), "（元）") || strings.HasSuffix(strings.TrimSpace(n), "(元)") {
			out = append(out, moneyColumn{col: i})
		}
	}
	return out
}

// wechatMoneyNames are the WeChat Pay money columns at the currency's precision, current and
// older layouts; wechatFeeNames carry fee precision.
var (
	wechatMoneyNames = []string{"应结订单金额", "代金券金额", "退款金额", "充值券退款金额", "订单金额", "申请退款金额",
		"总金额", "代金券或立减优惠金额", "代金券或立减优惠退款金额", "企业红包金额", "企业红包退款金额"}
	wechatFeeNames = []string{"手续费"}
)

// subMinorCell reads a money cell at exp as a SubMinor; an empty cell is zero.
func subMinorCell(s string, exp int, thousands byte) (SubMinor, error) {
	if s == "" {
		return 0, nil
	}
	v, err := money.ParseScaled(s, exp+subMinorDecimals, thousands)
	return SubMinor(v), err
}

// netOf is settled − fee, refusing an overflow.
func netOf(settled, fee SubMinor) (SubMinor, error) {
	n, ok := addChecked(int64(settled), -int64(fee))
	if !ok || fee == math.MinInt64 {
		return 0, errors.New("net amount overflows")
	}
	return SubMinor(n), nil
}

func addSub(a, b SubMinor) (SubMinor, bool) {
	n, ok := addChecked(int64(a), int64(b))
	return SubMinor(n), ok
}
