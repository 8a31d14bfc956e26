package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// An Alipay trade with a merchant discount (订单金额 105.00, 商家优惠 10.00, 商家实收 95.00)
// matches the key that asked for 105.00: no false AMOUNT_MISMATCH. Its fee and net are stored
// exactly in statement_lines (migration 00015).
func TestAlipayMerchantDiscountIsNoAmountMismatch_FeeAndNetStored(t *testing.T) {
	b := setup(t)
	k := b.key("discounted", 10500, "CNY", claim.StateCompleted)
	at := billDay.Add(10 * time.Hour).In(shanghai).Format("2006-01-02 15:04:05")
	bill := "#支付宝业务明细查询\n" +
		"#-----------------------------------------业务明细列表----------------------------------------\n" +
		"支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称,商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注\n" +
		fmt.Sprintf("%s\t,%s\t,交易,咖啡豆,%s,%s,,,,,abc***@163.com,105.00,95.00,0.00,0.00,0.00,10.00,0.00,,0.00,0.00,,-0.63,0.00,\n", k.ResourceID, k.DownstreamKey, at, at) +
		"#-----------------------------------------业务明细列表结束------------------------------------\n" +
		"#交易合计：1笔，商家实收共95.00元，商家优惠共10.00元\n" +
		"#退款合计：0笔，商家实收退款共0.00元，商家优惠退款共0.00元\n"
	gbk, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(bill))
	if err != nil {
		t.Fatal(err)
	}
	job := b.createJob("alipay-daily", "/nonexistent/{date}.csv", 10*time.Minute, func(s *reconcile.JobSpec) {
		s.Channel, s.Format = "alipay", "alipay"
	})
	run, err := b.reconcileFile(job, gbk)
	if err != nil {
		t.Fatal(err)
	}
	if _, names := b.findings(run.ID); len(names) != 0 {
		t.Errorf("findings %q; want none (the key asked for 105.00, the bill's 订单金额)", names)
	}
	if n := b.count(`SELECT count(*) FROM statement_lines WHERE amount_minor = 10500 AND fee_subminor = 63000
		AND net_subminor = 9437000 AND net_currency IS NULL`); n != 1 {
		t.Errorf("statement_lines holds %d lines with amount 10500, fee 63, net 9437 (thousandths: 63000, 9437000)", n)
	}
}
