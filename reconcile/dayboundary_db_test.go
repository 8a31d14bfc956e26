package reconcile_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// boundaryCase is a charge completed locally at one side of a channel's midnight and booked by
// the channel on the same or the other side.
type boundaryCase struct {
	name              string
	completed, booked time.Duration // from the midnight between the two bill days
}

// Charges within seconds of midnight — the local record and the channel's booking on either
// side of it — spread over two consecutive bills produce no finding on either day: not
// LOCAL_ONLY on the day the channel did not book them, not CHANNEL_ONLY on the day it did. For
// WeChat Pay the midnight is Asia/Shanghai's, for Stripe UTC's (local records are UTC).
func TestDayBoundary_ChargesAroundMidnightSpreadOverTwoBillsMakeNoFinding(t *testing.T) {
	cases := []boundaryCase{
		{"completed and booked before midnight", -2 * time.Second, -2 * time.Second},
		{"completed before, booked after midnight", -1 * time.Second, 1 * time.Second},
		{"completed after, booked before midnight", 1 * time.Second, -1 * time.Second},
		{"completed and booked after midnight", 2 * time.Second, 2 * time.Second},
		{"completed just before, booked just before", -500 * time.Millisecond, -1 * time.Second},
	}
	for _, ch := range []struct {
		format string
		zone   *time.Location
		bill   func(lines []boundaryLine) []byte
	}{
		{"wechat", shanghai, func(ls []boundaryLine) []byte {
			var wl []wechatLine
			for _, l := range ls {
				wl = append(wl, wechatLine{At: l.at, Txn: l.txn, Order: l.order, Status: "SUCCESS", Amount: l.amount})
			}
			return wechatBill(wl, 0)
		}},
		{"stripe", time.UTC, stripeBoundaryBill},
	} {
		t.Run(ch.format, func(t *testing.T) {
			b := setup(t)
			day1 := time.Date(2024, 3, 1, 0, 0, 0, 0, ch.zone)
			midnight := day1.AddDate(0, 0, 1)
			job := b.createJob(ch.format+"-daily", "/nonexistent/{date}.csv", 10*time.Minute, func(s *reconcile.JobSpec) {
				s.Channel, s.Format, s.TimeZone = ch.format, ch.format, ch.zone.String()
			})
			bills := map[string][]boundaryLine{}
			for i, c := range cases {
				k := b.key(fmt.Sprintf("boundary-%d", i), int64(1000+i), map[string]string{"wechat": "CNY", "stripe": "USD"}[ch.format], claim.StateCompleted)
				b.completedAt(k, midnight.Add(c.completed))
				booked := midnight.Add(c.booked)
				date := booked.In(ch.zone).Format(time.DateOnly)
				bills[date] = append(bills[date], boundaryLine{at: booked, txn: k.ResourceID, order: k.DownstreamKey, amount: int64(1000 + i)})
			}
			// A charge in the middle of each day, so that neither bill is empty.
			for d, date := range []string{day1.Format(time.DateOnly), midnight.Format(time.DateOnly)} {
				k := b.key(fmt.Sprintf("midday-%d", d), 500, map[string]string{"wechat": "CNY", "stripe": "USD"}[ch.format], claim.StateCompleted)
				noon := day1.AddDate(0, 0, d).Add(12 * time.Hour)
				b.completedAt(k, noon)
				bills[date] = append(bills[date], boundaryLine{at: noon, txn: k.ResourceID, order: k.DownstreamKey, amount: 500})
			}
			for _, date := range []string{day1.Format(time.DateOnly), midnight.Format(time.DateOnly)} {
				run, err := b.rec.Reconcile(b.ctx, reconcile.RunRequest{Job: job, Import: reconcile.ImportRequest{Channel: ch.format,
					Format: ch.format, BillDate: date, Importer: "daemon"}}, bytes.NewReader(ch.bill(bills[date])), nil)
				if err != nil {
					t.Fatalf("%s: %v", date, err)
				}
				if _, names := b.findings(run.ID); len(names) != 0 {
					t.Errorf("%s bill (%d lines): findings %q; want none", date, len(bills[date]), names)
				}
			}
		})
	}
}

type boundaryLine struct {
	at         time.Time
	txn, order string
	amount     int64
}

func stripeBoundaryBill(ls []boundaryLine) []byte {
	var b strings.Builder
	b.WriteString("balance_transaction_id,created_utc,currency,gross,fee,net,reporting_category,source_id,charge_id,payment_metadata[order_no]\n")
	for i, l := range ls {
		g := fmt.Sprintf("%d.%02d", l.amount/100, l.amount%100)
		fmt.Fprintf(&b, "txn_%d,%s,usd,%s,0.00,%s,charge,%s,%s,%s\n", i, l.at.UTC().Format("2006-01-02 15:04:05"), g, g, l.txn, l.txn, l.order)
	}
	return []byte(b.String())
}
