package paysim

import (
	"crypto/rsa"
	"fmt"
	"log/slog"
	"time"
)

// Config describes one simulated channel. Zero fields take the defaults in withDefaults.
type Config struct {
	// Seed makes fault decisions and generated ids reproducible.
	Seed int64
	// Now is the channel's clock (default time.Now); tests fix it for byte-stable statements.
	Now func() time.Time

	// Latency is added to every charge, refund, lookup and notification call; LatencyJitter adds
	// up to that much more, drawn from the seed.
	Latency, LatencyJitter time.Duration
	// ErrorRate is the share of calls answered 503 before anything is committed.
	ErrorRate float64
	// DropResponseRate is the share of charge, refund and notification calls that commit and
	// then drop the response (the connection is closed; 502 when it cannot be hijacked).
	DropResponseRate float64
	// DoubleChargeRate is the share of charges sent without a key that are charged twice.
	DoubleChargeRate float64

	// DeclinePayees and DeclineAmounts make charges to those payees, or of exactly those
	// amounts in minor units, fail with failure_code "declined".
	DeclinePayees  []string
	DeclineAmounts []int64
	// FeeBasisPoints is the channel's fee on a charge (default 60 = 0.60%; -1 for no fee).
	FeeBasisPoints int

	// Statement identities: the WeChat Pay AppID and merchant id, the Alipay account (PID), the
	// Adyen company and merchant accounts.
	WechatAppID, WechatMchID    string
	AlipayPID                   string
	AdyenCompany, AdyenMerchant string

	// MaxCharges, MaxRefunds and MaxNotifications bound the state (default 100 000 each);
	// beyond them new writes answer 503 state_full.
	MaxCharges, MaxRefunds, MaxNotifications int

	// StateFile, when set, is loaded at start and written atomically and fsync'd after every
	// change, before the answer, so confirmed charges survive kill -9; a failed write is
	// retried every SaveInterval (default 1 s) and on Close.
	StateFile    string
	SaveInterval time.Duration

	// NotifyURL is where asynchronous callbacks (charge.succeeded, charge.closed,
	// charge.refunded) are POSTed; empty: they wait until SetNotifyURL. NotifySecret signs them
	// (HMAC-SHA256, HeaderSignature; default "paysim-notify-secret").
	NotifyURL    string
	NotifySecret []byte
	// NotifySchedule is the pause before each retry of an unacknowledged callback (default 1s,
	// 2s, 5s, 15s, 1m, 5m, 15m, 1h); after the last one the channel gives up.
	NotifySchedule []time.Duration
	// NotifyDuplicateRate: share of callbacks sent once more after their acknowledgement.
	// NotifyReorderRate: share held back until the order's next event has been tried (or for
	// NotifyDelay). NotifyDelayRate: share first sent only after NotifyDelay (default 2 s).
	// LateCloseRate: share of succeeded charges followed by a stale charge.closed once the
	// succeeded callback is acknowledged.
	NotifyDuplicateRate, NotifyReorderRate, NotifyDelayRate, LateCloseRate float64
	NotifyDelay                                                            time.Duration
	// NotifyWorkers callbacks are sent at a time (default 4); NotifyTimeout bounds one POST
	// (default 5 s); NotifyPoll is how often due callbacks are looked for (default 50 ms).
	NotifyWorkers             int
	NotifyTimeout, NotifyPoll time.Duration

	// BillReady is when a date's WeChat Pay, Alipay and Adyen bills can be had: ReadyAnytime
	// (default: as they stand) or ReadyNextDay10 (from 10:00 Asia/Shanghai the next day, the
	// channels' rule; Adyen's batch once its UTC day has ended).
	BillReady string
	// WechatBillMode is how WeChat Pay's bill queries answer: WechatBillPlain (default),
	// WechatBillEncrypted or WechatBillSplit (WechatBillParts encrypted parts, default 3).
	WechatBillMode  string
	WechatBillParts int
	// WechatPlatformKey and AlipayKey are the keys paysim signs its answers with (nil: made on
	// first use). RotateWechatPlatformKey makes new platform keys.
	WechatPlatformKey, AlipayKey *rsa.PrivateKey
	// WechatPublicKeyMode signs answers with a WeChat Pay public key (its ID PUB_KEY_ID_…)
	// instead of a platform certificate.
	WechatPublicKeyMode bool
	// WechatDownloadLife and AlipayDownloadLife are how long a download URL lives (default 5 min,
	// WeChat Pay's newer docs, and 30 s, Alipay's).
	WechatDownloadLife, AlipayDownloadLife time.Duration

	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.FeeBasisPoints == 0:
		c.FeeBasisPoints = 60
	case c.FeeBasisPoints == -1:
		c.FeeBasisPoints = 0
	}
	if c.WechatAppID == "" {
		c.WechatAppID = "wx2421b1c4370ec43b"
	}
	if c.WechatMchID == "" {
		c.WechatMchID = "1900000109"
	}
	if c.AlipayPID == "" {
		c.AlipayPID = "2088101122136241"
	}
	if c.AdyenCompany == "" {
		c.AdyenCompany = "PaysimCompany"
	}
	if c.AdyenMerchant == "" {
		c.AdyenMerchant = "PaysimMerchantCOM"
	}
	for _, n := range []*int{&c.MaxCharges, &c.MaxRefunds, &c.MaxNotifications} {
		if *n == 0 {
			*n = 100_000
		}
	}
	if c.SaveInterval == 0 {
		c.SaveInterval = time.Second
	}
	if len(c.NotifySecret) == 0 {
		c.NotifySecret = []byte("paysim-notify-secret")
	}
	if c.NotifySchedule == nil {
		c.NotifySchedule = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 15 * time.Second,
			time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour}
	}
	if c.NotifyDelay == 0 {
		c.NotifyDelay = 2 * time.Second
	}
	if c.NotifyWorkers == 0 {
		c.NotifyWorkers = 4
	}
	if c.NotifyTimeout == 0 {
		c.NotifyTimeout = 5 * time.Second
	}
	if c.NotifyPoll == 0 {
		c.NotifyPoll = 50 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BillReady == "" {
		c.BillReady = ReadyAnytime
	}
	if c.WechatBillMode == "" {
		c.WechatBillMode = WechatBillPlain
	}
	if c.WechatBillParts == 0 {
		c.WechatBillParts = 3
	}
	if c.WechatDownloadLife == 0 {
		c.WechatDownloadLife = 5 * time.Minute
	}
	if c.AlipayDownloadLife == 0 {
		c.AlipayDownloadLife = 30 * time.Second
	}
	rates := []struct {
		name string
		v    float64
	}{{"ErrorRate", c.ErrorRate}, {"DropResponseRate", c.DropResponseRate}, {"DoubleChargeRate", c.DoubleChargeRate},
		{"NotifyDuplicateRate", c.NotifyDuplicateRate}, {"NotifyReorderRate", c.NotifyReorderRate},
		{"NotifyDelayRate", c.NotifyDelayRate}, {"LateCloseRate", c.LateCloseRate}}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) {
			return c, fmt.Errorf("paysim: %s: must be between 0 and 1, got %v", r.name, r.v)
		}
	}
	switch {
	case c.Latency < 0 || c.LatencyJitter < 0:
		return c, fmt.Errorf("paysim: Latency and LatencyJitter must not be negative")
	case c.Latency+c.LatencyJitter > time.Minute:
		return c, fmt.Errorf("paysim: Latency plus LatencyJitter must be at most 1m")
	case c.FeeBasisPoints < 0 || c.FeeBasisPoints > 10000:
		return c, fmt.Errorf("paysim: FeeBasisPoints: must be between 0 and 10000 (or -1), got %d", c.FeeBasisPoints)
	case c.MaxCharges < 0 || c.MaxRefunds < 0 || c.MaxNotifications < 0:
		return c, fmt.Errorf("paysim: MaxCharges, MaxRefunds and MaxNotifications must not be negative")
	case len(c.NotifySchedule) > 32 || c.NotifyDelay < 0 || c.NotifyDelay > time.Hour:
		return c, fmt.Errorf("paysim: NotifySchedule holds at most 32 steps and NotifyDelay is 0..1h")
	case c.NotifyWorkers < 1 || c.NotifyWorkers > 64 || c.NotifyTimeout < 0 || c.NotifyPoll < time.Millisecond:
		return c, fmt.Errorf("paysim: NotifyWorkers is 1..64, NotifyTimeout not negative, NotifyPoll at least 1ms")
	case c.SaveInterval < 0:
		return c, fmt.Errorf("paysim: SaveInterval must not be negative")
	case c.BillReady != ReadyAnytime && c.BillReady != ReadyNextDay10:
		return c, fmt.Errorf("paysim: BillReady: %q is neither %q nor %q", c.BillReady, ReadyAnytime, ReadyNextDay10)
	case c.WechatBillMode != WechatBillPlain && c.WechatBillMode != WechatBillEncrypted && c.WechatBillMode != WechatBillSplit:
		return c, fmt.Errorf("paysim: WechatBillMode: %q is not plain, encrypted or split", c.WechatBillMode)
	case c.WechatBillParts < 1 || c.WechatBillParts > 16:
		return c, fmt.Errorf("paysim: WechatBillParts must be 1..16")
	case c.WechatDownloadLife < 0 || c.AlipayDownloadLife < 0:
		return c, fmt.Errorf("paysim: download URL lives must not be negative")
	}
	return c, nil
}
