package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/idemops/idemops/claim/idemclient"
)

// TrafficConfig shapes the generated traffic. Rates are fractions of requests, 0..1.
type TrafficConfig struct {
	// APIURL is the payments service, e.g. http://127.0.0.1:8081.
	APIURL string
	// APIKeys are the tenants' bearer keys to spread requests over.
	APIKeys []string
	// PerSecond is the number of new payments started per second (default 2).
	PerSecond float64
	// Retry, Duplicate, Mismatch, Crash and Drop are the rates of each scenario (defaults 0.3,
	// 0.1, 0.05, 0.03, 0.05): a retry with the same key, three concurrent identical requests, the
	// same key with a changed amount, a crash between the channel call and the local commit
	// (left for the daemon), and a channel answer lost after the charge (retried by the client).
	Retry, Duplicate, Mismatch, Crash, Drop float64
	Seed                                    uint64
	Logger                                  *slog.Logger
}

func (c TrafficConfig) withDefaults() TrafficConfig {
	if c.PerSecond == 0 {
		c.PerSecond = 2
	}
	if c.Retry == 0 && c.Duplicate == 0 && c.Mismatch == 0 && c.Crash == 0 && c.Drop == 0 {
		c.Retry, c.Duplicate, c.Mismatch, c.Crash, c.Drop = 0.3, 0.1, 0.05, 0.03, 0.05
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// TrafficStats counts responses by scenario and status.
type TrafficStats struct {
	mu     sync.Mutex
	counts map[string]int
}

func (s *TrafficStats) add(scenario string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.counts[fmt.Sprintf("%s %d", scenario, status)]++
}

// Snapshot returns a copy of the counts ("scenario status" → n).
func (s *TrafficStats) Snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// RunTraffic sends payments until ctx is done. At most 16 scenarios run at once.
func RunTraffic(ctx context.Context, cfg TrafficConfig, stats *TrafficStats) {
	cfg = cfg.withDefaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	// The client side of the contract: each send is one logical operation whose key the
	// transport reuses on its own retries (409 in progress, 503, lost connections). Sends that
	// inject a fault make one attempt, so that the fault is not repeated.
	client := &http.Client{Timeout: 15 * time.Second,
		Transport: &idemclient.Transport{MaxAttempts: 4, BaseDelay: 50 * time.Millisecond, MaxDelay: 2 * time.Second}}
	once := &http.Client{Timeout: 15 * time.Second, Transport: &idemclient.Transport{MaxAttempts: 1}}
	sem := make(chan struct{}, 16)
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.PerSecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	payees := []string{"acme-books", "blue-coffee", "city-metro", "declined-shop"}
	// Currencies of every ISO 4217 exponent: two (CNY, USD, and IDR, whose display digits are
	// zero, which once showed 100× too much), zero (JPY) and three (BHD).
	currencies := []string{"CNY", "CNY", "USD", "JPY", "IDR", "BHD"}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the service is slow: skip rather than pile up
		}
		p := map[string]any{
			"amount_minor":      100 * (1 + rng.IntN(500)),
			"currency":          currencies[rng.IntN(len(currencies))],
			"merchant_order_no": fmt.Sprintf("ord-%d-%d", time.Now().Unix(), n),
			"payee":             payees[rng.IntN(len(payees))],
			"description":       "demo order",
			"client_ts":         time.Now().UTC().Format(time.RFC3339Nano),
		}
		key := fmt.Sprintf("demo-%x-%d", rng.Uint64(), n)
		apiKey := cfg.APIKeys[rng.IntN(len(cfg.APIKeys))]
		r := rng.Float64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t := trafficRun{ctx: ctx, client: client, once: once, cfg: cfg, stats: stats, key: key, apiKey: apiKey}
			switch {
			case r < cfg.Crash:
				t.send("crash", p, map[string]string{"X-Demo-Crash": "after-charge"})
			case r < cfg.Crash+cfg.Drop:
				t.send("drop", p, map[string]string{"X-Paysim-Fault": "drop-response"})
				t.send("drop-retry", p, nil)
			case r < cfg.Crash+cfg.Drop+cfg.Mismatch:
				t.send("first", p, nil)
				p["amount_minor"] = p["amount_minor"].(int) + 1
				t.send("mismatch", p, nil)
			case r < cfg.Crash+cfg.Drop+cfg.Mismatch+cfg.Duplicate:
				var dw sync.WaitGroup
				for i := 0; i < 3; i++ {
					dw.Add(1)
					go func() { defer dw.Done(); t.send("duplicate", p, nil) }()
				}
				dw.Wait()
			case r < cfg.Crash+cfg.Drop+cfg.Mismatch+cfg.Duplicate+cfg.Retry:
				t.send("first", p, nil)
				p["client_ts"] = time.Now().UTC().Format(time.RFC3339Nano) // a retry's clock moves on
				t.send("retry", p, nil)
			default:
				t.send("first", p, nil)
			}
		}()
	}
}

type trafficRun struct {
	ctx    context.Context
	client *http.Client
	once   *http.Client // for sends that inject a fault
	cfg    TrafficConfig
	stats  *TrafficStats
	key    string
	apiKey string
}

func (t trafficRun) send(scenario string, body map[string]any, headers map[string]string) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, t.cfg.APIURL+"/v1/payments", bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+t.apiKey)
	req.Header.Set("Idempotency-Key", t.key)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := t.client
	if len(headers) > 0 {
		client = t.once
	}
	res, err := client.Do(req)
	if err != nil {
		if t.ctx.Err() == nil {
			t.stats.add(scenario, 0)
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	res.Body.Close()
	t.stats.add(scenario, res.StatusCode)
	if idemclient.Replayed(res) {
		t.stats.add(scenario+" replayed", res.StatusCode)
	}
}
