package paysim

import (
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	rates := []struct {
		name string
		v    float64
	}{{"ErrorRate", c.ErrorRate}, {"DropResponseRate", c.DropResponseRate}, {"DoubleChargeRate", c.DoubleChargeRate}}
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
	case c.SaveInterval < 0:
		return c, fmt.Errorf("paysim: SaveInterval must not be negative")
	}
	return c, nil
}
