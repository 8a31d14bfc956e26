package reconcile_test

import (
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

// Not ready, expired and skewed, for the channels besides WeChat Pay (whose cases are in
// channels_db_test.go): a bill the channel has not made yet is asked for again until the job's
// ready deadline; a download URL past its life is not fetched; a clock too far off is refused by
// the channel, and the run says so in one line.

// clockStep moves a shared clock on by step each time the run reports it is waiting: the
// channel's and the fetcher's time pass between attempts without the test waiting for them.
type clockStep struct {
	clock *atomic.Int64
	step  time.Duration
	waits int
}

func (c *clockStep) Report(phase string, _, _ int64) {
	if phase == "waiting" {
		c.waits++
		c.clock.Add(int64(c.step))
	}
}

// sharedClock is a clock the channel (paysim) and the fetcher both read, starting at start.
func sharedClock(start time.Time) (*atomic.Int64, func() time.Time) {
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	return &clock, func() time.Time { return time.Unix(0, clock.Load()) }
}

// Alipay answers isp.bill_not_exist until 10:00 the next day: the run asks again until the
// job's ready deadline and then fails saying how often it asked and what Alipay said; with a
// deadline past 10:00 it imports the bill as soon as it is there.
func TestAlipay_BillNotExistIsRetriedUntilTheDeadline(t *testing.T) {
	clock, now := sharedClock(billDay.AddDate(0, 0, 1).Add(9 * time.Hour))
	rig := newChannelRig(t, paysim.Config{BillReady: paysim.ReadyNextDay10, Now: now}, func(cfg *reconcile.Config) { cfg.Now = now })
	rig.charges(billDay)
	rig.alipayAccount("alipay-2088")
	job := rig.job("alipay-daily", "alipay-2088", "alipay", "")

	// 09:00 to 09:30, asking every ten minutes: four attempts, then the deadline.
	job.ReadyDeadlineSeconds = 1800
	p := &clockStep{clock: clock, step: 10 * time.Minute}
	run, err := rig.rec.RunJob(rig.ctx, job, billDate, "daemon", p)
	if !errors.Is(err, reconcile.ErrNotReady) {
		t.Fatalf("a bill not there by the deadline: %v", err)
	}
	rig.wantRefused(run, err, "statement not ready: Alipay has no bill for 2024-03-01 yet (isp.bill_not_exist); gave up at the ready deadline (30m0s) after 4 attempts")
	if p.waits != 3 {
		t.Errorf("the run waited %d times; want 3 (09:00, 09:10, 09:20)", p.waits)
	}

	// From 09:30 with an hour's deadline: at 10:00 the bill is there.
	job.ReadyDeadlineSeconds = 3600
	p = &clockStep{clock: clock, step: 10 * time.Minute}
	run, err = rig.rec.RunJob(rig.ctx, job, billDate, "daemon", p)
	rig.wantImported(run, err, "alipay at 10:00")
	if p.waits != 3 {
		t.Errorf("the run waited %d times; want 3 (09:30, 09:40, 09:50)", p.waits)
	}
}

// A bill_download_url lives 30 seconds from the answer: one the fetcher could not start on in
// time is not fetched at all, and the run says it expired; one fetched within its life imports.
func TestAlipay_ExpiredDownloadURLIsNotFetched(t *testing.T) {
	for _, c := range []struct {
		name     string
		late     time.Duration
		expired  bool
		download int32
	}{{"31 s after the answer", 31 * time.Second, true, 0}, {"25 s after the answer", 25 * time.Second, false, 1}} {
		t.Run(c.name, func(t *testing.T) {
			clock := &stepClock{}
			rig := newChannelRig(t, paysim.Config{}, func(cfg *reconcile.Config) { cfg.Now = clock.now })
			rig.charges(billDay)
			rig.alipayAccount("alipay-2088")
			var downloads atomic.Int32
			rig.setTamper(func(req *http.Request, _ *http.Response) error {
				switch req.URL.Path {
				case "/gateway.do":
					clock.advance(c.late) // the answer took that long to be acted on
				case "/downloadBillFile.resource":
					downloads.Add(1)
				}
				return nil
			})
			run, err := rig.rec.RunJob(rig.ctx, rig.job("alipay-daily", "alipay-2088", "alipay", ""), billDate, "daemon", nil)
			if c.expired {
				rig.wantRefused(run, err, "Alipay's bill_download_url expired before it could be fetched")
			} else {
				rig.wantImported(run, err, "alipay")
			}
			if n := downloads.Load(); n != c.download {
				t.Errorf("the bill was downloaded %d times; want %d", n, c.download)
			}
		})
	}
}

// Alipay refuses a request whose timestamp is more than 15 minutes off its own clock (paysim's
// tolerance): a clock 10 minutes ahead still fetches, one 20 minutes behind is refused, the run
// saying it is the timestamp.
func TestAlipay_ClockSkew(t *testing.T) {
	for _, c := range []struct {
		skew time.Duration
		ok   bool
	}{{10 * time.Minute, true}, {-20 * time.Minute, false}} {
		t.Run(c.skew.String(), func(t *testing.T) {
			rig := newChannelRig(t, paysim.Config{}, func(cfg *reconcile.Config) {
				cfg.Now = func() time.Time { return time.Now().Add(c.skew) }
			})
			rig.charges(billDay)
			rig.alipayAccount("alipay-2088")
			run, err := rig.rec.RunJob(rig.ctx, rig.job("alipay-daily", "alipay-2088", "alipay", ""), billDate, "daemon", nil)
			if c.ok {
				rig.wantImported(run, err, "alipay")
			} else {
				rig.wantRefused(run, err, "Alipay refused the request's timestamp (40002 isv.invalid-timestamp)")
			}
		})
	}
}

// Adyen answers 404 for a settlement details report not generated yet (paysim, strict: until its
// UTC day has ended): the run asks again until the job's ready deadline, then fails; a deadline
// past midnight imports the report.
func TestAdyen_ReportNotThereYetIsRetriedUntilTheDeadline(t *testing.T) {
	start := time.Date(2024, 3, 1, 22, 0, 0, 0, time.UTC) // billDate's batch, before its day ends
	clock, now := sharedClock(start)
	rig := newChannelRig(t, paysim.Config{BillReady: paysim.ReadyNextDay10, Now: now}, func(cfg *reconcile.Config) { cfg.Now = now })
	rig.charges(billDay)
	rig.account("adyen-key", reconcile.KindAdyen, reconcile.AccountSettings{MerchantAccount: rig.keys.AdyenMerchant, Auth: "api_key",
		BatchOrigin: &reconcile.BatchOrigin{Batch: 0, Date: "1970-01-01"}},
		map[string]reconcile.CredentialInput{reconcile.CredAPIKey: {Value: "AQE-paysim-key"}})
	job := rig.job("adyen-daily", "adyen-key", "adyen", "")
	job.TimeZone = "UTC"
	batch, _ := reconcile.AdyenBatch(reconcile.BatchOrigin{Batch: 0, Date: "1970-01-01"}, billDate)

	job.ReadyDeadlineSeconds = 1800
	p := &clockStep{clock: clock, step: 10 * time.Minute}
	run, err := rig.rec.RunJob(rig.ctx, job, billDate, "daemon", p)
	if !errors.Is(err, reconcile.ErrNotReady) {
		t.Fatalf("a report not there by the deadline: %v", err)
	}
	rig.wantRefused(run, err, "statement not ready: Adyen has no settlement details report for batch "+
		strconv.FormatInt(batch, 10)+" yet (HTTP 404); gave up at the ready deadline (30m0s) after 4 attempts")
	if p.waits != 3 {
		t.Errorf("the run waited %d times; want 3 (22:00, 22:10, 22:20)", p.waits)
	}

	// From 22:30 with two hours' deadline, asking every half hour: at 00:00 the report is there.
	job.ReadyDeadlineSeconds = 7200
	p = &clockStep{clock: clock, step: 30 * time.Minute}
	run, err = rig.rec.RunJob(rig.ctx, job, billDate, "daemon", p)
	rig.wantImported(run, err, "adyen after midnight")
	if p.waits != 3 {
		t.Errorf("the run waited %d times; want 3 (22:30, 23:00, 23:30)", p.waits)
	}
}
