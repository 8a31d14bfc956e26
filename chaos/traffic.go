package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/claim/idemclient"
)

// keyRecord is what the client knows of one logical payment (one idempotency key).
type keyRecord struct {
	Tenant, APIKey, Key string
	Body                []byte // the intent as first sent
	Scenario            string
	// Saw2xx: some answer under this key was 2xx; PaymentID is the payment it named.
	Saw2xx    bool
	PaymentID string
	// Mismatch2xx: the same key with another amount was answered 2xx (must never happen).
	Mismatch2xx bool
	// Faulted: a fault was injected on purpose into this key's requests (a crash, a dropped
	// answer, an error, a replica killed under it): reconciliation may rightly flag it.
	Faulted bool
	// LastStatus is the last answer (0: none reached the client).
	LastStatus int
}

// op is one logical client call (its retries included), for the time series.
type op struct {
	end     time.Time
	latency time.Duration
	status  int
	kind    string // error kind, "" for an answer below 500 other than 409/429
}

// traffic drives the payments API through the proxy with the idempotent client.
type traffic struct {
	url     string
	apiKeys map[string]string // tenant → bearer key
	tenants []string
	rate    float64
	rng     *rand.Rand
	client  *idemclient.Client
	once    *idemclient.Client
	fault   func() string // the paysim fault window open now ("" none)
	hist    *history.Recorder

	mu   sync.Mutex
	keys []*keyRecord
	ops  []op
}

func newTraffic(url string, apiKeys map[string]string, tenants []string, rate float64, seed int64, fault func() string, hist *history.Recorder) *traffic {
	hc := &http.Client{Timeout: 20 * time.Second}
	return &traffic{url: url, apiKeys: apiKeys, tenants: tenants, rate: rate, fault: fault, hist: hist,
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x7261666669632d31)),
		client: &idemclient.Client{HTTP: hc, MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second},
		once:   &idemclient.Client{HTTP: hc, MaxAttempts: 1}}
}

var (
	payees     = []string{"acme-books", "blue-coffee", "city-metro", "declined-shop"}
	currencies = []string{"CNY", "CNY", "USD", "JPY", "IDR", "BHD"}
)

// run starts new logical payments at the rate until ctx ends; at most 32 run at once.
func (t *traffic) run(ctx context.Context) {
	sem := make(chan struct{}, 32)
	tick := time.NewTicker(time.Duration(float64(time.Second) / t.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the world is slow: skip rather than pile up
		}
		tenant := t.tenants[t.rng.IntN(len(t.tenants))]
		body := map[string]any{"amount_minor": 100 * (1 + t.rng.IntN(500)), "currency": currencies[t.rng.IntN(len(currencies))],
			"merchant_order_no": fmt.Sprintf("chaos-ord-%d", n), "payee": payees[t.rng.IntN(len(payees))], "description": "chaos order"}
		rec := &keyRecord{Tenant: tenant, APIKey: t.apiKeys[tenant], Key: fmt.Sprintf("chaos-%016x-%d", t.rng.Uint64(), n)}
		rec.Body, _ = json.Marshal(body)
		r := t.rng.Float64()
		fault := t.fault()
		if fault != "" && t.rng.IntN(2) == 0 {
			fault = "" // half the traffic in a fault window is spared
		}
		switch {
		case r < 0.03:
			rec.Scenario = "crash"
		case r < 0.08:
			rec.Scenario = "mismatch"
		case r < 0.18:
			rec.Scenario = "duplicate"
		case r < 0.43:
			rec.Scenario = "retry"
		default:
			rec.Scenario = "single"
		}
		t.mu.Lock()
		t.keys = append(t.keys, rec)
		t.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.scenario(ctx, rec, body, fault)
		}()
	}
}

func (t *traffic) scenario(ctx context.Context, rec *keyRecord, body map[string]any, fault string) {
	switch fault {
	case "error", "drop-response":
		// One attempt that the channel fails or drops, then the client retries with the key.
		t.send(ctx, rec, rec.Body, http.Header{"X-Paysim-Fault": {fault}}, true)
	case "":
	default: // latency=…, notify-duplicate, notify-reorder, late-close: on every attempt
		t.send(ctx, rec, rec.Body, http.Header{"X-Paysim-Fault": {fault}}, false)
		return
	}
	switch rec.Scenario {
	case "crash":
		t.send(ctx, rec, rec.Body, http.Header{"X-Demo-Crash": {"after-charge"}}, true) // left to the daemon
	case "mismatch":
		first := t.send(ctx, rec, rec.Body, nil, false)
		body["amount_minor"] = body["amount_minor"].(int) + 1
		other, _ := json.Marshal(body)
		// Only a first intent the server surely recorded (a final answer) makes a 2xx for the
		// other amount wrong: a first attempt lost before its claim committed left no key.
		recorded := first >= 200 && first < 300 || first == http.StatusPaymentRequired
		if status := t.send(ctx, rec, other, nil, false); recorded && status >= 200 && status < 300 {
			t.mu.Lock()
			rec.Mismatch2xx = true
			t.mu.Unlock()
		}
	case "duplicate":
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); t.send(ctx, rec, rec.Body, nil, false) }()
		}
		wg.Wait()
	case "retry":
		t.send(ctx, rec, rec.Body, nil, false)
		t.send(ctx, rec, rec.Body, nil, false)
	default:
		t.send(ctx, rec, rec.Body, nil, false)
	}
}

// send is one logical call under rec's key; once makes a single attempt (a fault is injected).
func (t *traffic) send(ctx context.Context, rec *keyRecord, body []byte, hdr http.Header, once bool) int {
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + rec.APIKey}}
	for k, v := range hdr {
		h[k] = v
	}
	c := t.client
	if once {
		c = t.once
		t.mu.Lock()
		rec.Faulted = true
		t.mu.Unlock()
	}
	start := time.Now()
	done := t.hist.Begin(history.Input{Key: httpKey(rec.Tenant, rec.Key), Kind: history.Call, Intent: history.Intent(body)})
	res, err := c.Do(ctx, http.MethodPost, t.url+"/v1/payments", rec.Key, h, body)
	o := op{end: time.Now(), latency: time.Since(start)}
	var answer struct {
		PaymentID string `json:"payment_id"`
	}
	problem := ""
	if res != nil && res.Response != nil {
		o.status = res.Response.StatusCode
		_ = json.Unmarshal(res.Body, &answer)
		problem = history.ProblemType(res.Body)
	}
	// Every call is in the history, one cut short by the end of the run too: it may have
	// recorded its intent.
	done(history.HTTPClass(o.status, problem, answer.PaymentID))
	switch {
	case ctx.Err() != nil && o.status == 0:
		return 0 // the run ended under it: not an observation
	case o.status == 0 && errors.Is(err, context.DeadlineExceeded):
		o.kind = "timeout"
	case o.status == 0:
		o.kind = "conn"
	case o.status >= 500:
		o.kind = fmt.Sprintf("%d", o.status)
	case o.status == http.StatusConflict || o.status == http.StatusTooManyRequests:
		o.kind = fmt.Sprintf("%d", o.status)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ops = append(t.ops, o)
	if o.status != 0 {
		rec.LastStatus = o.status
	}
	if o.status >= 200 && o.status < 300 && string(body) == string(rec.Body) {
		rec.Saw2xx = true
		if rec.PaymentID == "" {
			rec.PaymentID = answer.PaymentID
		}
	}
	return o.status
}

// catchUp is the client finishing what it started: every key whose last answer was a 5xx or
// none (and was not a deliberate crash left to the daemon) is sent once more with its key.
func (t *traffic) catchUp(ctx context.Context) int {
	t.mu.Lock()
	var todo []*keyRecord
	for _, r := range t.keys {
		if r.Scenario != "crash" && (r.LastStatus == 0 || r.LastStatus >= 500 || r.LastStatus == http.StatusConflict) {
			todo = append(todo, r)
		}
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, r := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); defer func() { <-sem }(); t.send(ctx, r, r.Body, nil, false) }()
	}
	wg.Wait()
	return len(todo)
}

// httpKey is the history's name of a payments key: path, tenant and key.
func httpKey(tenant, key string) string { return "http|" + tenant + "|" + key }
