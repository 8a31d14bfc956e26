package reconcile_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

// Recon jobs fetch bills the way the channels serve them, from paysim: WeChat Pay's download
// gzip-compressed, Alipay's query answering the URL of a zip with 业务明细 and 业务明细(汇总).
// Both import whole, their settlements agree with their rows, and paysim's fees (60 bp, half up,
// none returned on refunds) agree with the jobs' fee schedule: no settlement or fee finding.
func TestRunJobFetchesPackedBillsFromPaysim(t *testing.T) {
	ps, err := paysim.NewServer(paysim.Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ps)
	t.Cleanup(srv.Close)
	b := setup(t, allow(srv.URL))
	client := paysim.NewClient(srv.URL, nil)
	for i, amount := range []int64{12800, 50, 123456, 999} {
		at := billDay.Add(time.Duration(9+i) * time.Hour)
		if _, err := client.InsertChannelCharge(context.Background(), paysim.ChannelCharge{AmountMinor: amount, Currency: "CNY",
			MerchantOrderNo: "paysim-order-" + string(rune('a'+i)), CreatedAt: &at}); err != nil {
			t.Fatal(err)
		}
	}
	fees := &reconcile.FeeSchedule{RateBP: "60", Refunds: "kept"}
	for _, tt := range []struct{ format, source string }{
		{"wechat", srv.URL + "/statements/{date}?format=wechat&tar_type=GZIP"},
		{"alipay", srv.URL + "/alipay/bill-url?bill_date={date}"},
	} {
		job := b.createJob("paysim-"+tt.format, tt.source, 0, func(s *reconcile.JobSpec) {
			s.Channel, s.Format, s.FeeSchedule = "paysim-"+tt.format, tt.format, fees
		})
		run, err := b.rec.RunJob(b.ctx, job, billDate, "daemon", nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.format, err)
		}
		if run.RowsLoaded != 4 || run.Counts["CHANNEL_ONLY"] != 4 || len(run.Counts) != 1 {
			t.Errorf("%s: loaded %d, counts %v; want 4 lines, 4 CHANNEL_ONLY (no local keys) and nothing else", tt.format, run.RowsLoaded, run.Counts)
		}
		var summary string
		if err := b.db.Raw(`SELECT summary::text FROM statements WHERE id = ?`, *run.StatementID).Scan(&summary).Error; err != nil {
			t.Fatal(err)
		}
		var sum reconcile.Summary
		if err := json.Unmarshal([]byte(summary), &sum); err != nil {
			t.Fatal(err)
		}
		if len(sum.Settlements) != 1 || !sum.SettlementsOK() || sum.Settlements[0].Lines != 4 {
			t.Errorf("%s: settlements %+v; want one, agreeing, over 4 lines", tt.format, sum.Settlements)
		}
	}
}
