package paysim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemops/idemops/downstream/paysim"
)

// TestStatement_ListsAChargeOnlyOnItsChannel: a charge made through a channel (and its refund)
// appears on that channel's statements only; a charge of no channel in particular keeps the
// old rule (CNY on every bill, other currencies on Stripe's and Adyen's).
func TestStatement_ListsAChargeOnlyOnItsChannel(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	clk.Set("2024-03-15T04:00:00Z") // noon in Shanghai: the same date in every format's zone
	srv, c := start(t, paysim.Config{Seed: 7, Now: clk.Now})
	ctx := context.Background()
	routed := map[string]paysim.ChargeRequest{
		"order-wx":     {AmountMinor: 100, Currency: "CNY", Channel: "wechat"},
		"order-ali":    {AmountMinor: 200, Currency: "CNY", Channel: "alipay"},
		"order-stripe": {AmountMinor: 300, Currency: "USD", Channel: "stripe"},
		"order-adyen":  {AmountMinor: 400, Currency: "IDR", Channel: "adyen"},
		"order-none":   {AmountMinor: 500, Currency: "CNY"},
	}
	for order, req := range routed {
		if _, err := c.CreateCharge(ctx, order, req, ""); err != nil {
			t.Fatalf("charge %s: %v", order, err)
		}
	}
	if _, err := c.Refund(ctx, "order-wx", "refund-wx", paysim.RefundRequest{AmountMinor: 50, Reason: "partial"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 600, Currency: "USD", MerchantOrderNo: "order-only",
		Channel: "adyen"}); err != nil {
		t.Fatal(err)
	}
	want := map[paysim.Format][]string{
		paysim.FormatWechat: {"order-wx", "order-none"},
		paysim.FormatAlipay: {"order-ali", "order-none"},
		paysim.FormatStripe: {"order-stripe", "order-none"},
		paysim.FormatAdyen:  {"order-adyen", "order-only", "order-none"},
	}
	all := []string{"order-wx", "order-ali", "order-stripe", "order-adyen", "order-none", "order-only"}
	for f, listed := range want {
		b, err := srv.Statement("2024-03-15", f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, order := range all {
			in := strings.Contains(text, order)
			should := false
			for _, o := range listed {
				should = should || o == order
			}
			if in != should {
				t.Errorf("%s statement lists %s: %v, want %v", f, order, in, should)
			}
		}
		if f == paysim.FormatWechat && strings.Count(text, "refund-wx") != 1 {
			t.Errorf("wechat statement: the refund of order-wx is not listed once")
		}
		if f != paysim.FormatWechat && strings.Contains(text, "refund-wx") {
			t.Errorf("%s statement lists the refund of a WeChat Pay charge", f)
		}
	}
	// The lookup says where the charge went.
	ch, err := c.GetCharge(ctx, "order-ali")
	if err != nil || ch.Channel != "alipay" {
		t.Fatalf("lookup of order-ali: %+v %v; want channel alipay", ch, err)
	}
	_, err = c.CreateCharge(ctx, "order-bad", paysim.ChargeRequest{AmountMinor: 1, Currency: "CNY", Channel: "unionpay"}, "")
	var ae *paysim.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "channel") {
		t.Fatalf("a charge through an unknown channel: %v; want a refusal naming channel", err)
	}
}
