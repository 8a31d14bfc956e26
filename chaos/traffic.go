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

	"google.golang.org/grpc"

	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/claim/idemclient"
)

// keyRecord is what the client knows of one logical payment (one idempotency key).
type keyRecord struct {
	// Path is how the client sends it: PathHTTP (POST /v1/payments), PathGRPC (Payments/Charge)
	// or PathCheckout (POST /v1/checkout with a one-time token; Key is then the key the token
	// stands for, "token:<sha256>").
	Path                string
	Token               string
	TipFault            string // a tip's paysim fault, sent on every attempt
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
	// Done: the client's scenario is over (only a late retry or the catch-up sends again).
	Done bool
}

// op is one logical client call (its retries included), for the time series.
type op struct {
	tenant  string
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
	hc      *http.Client
	grpc    *grpc.ClientConn // every payments replica, round robin

	mu      sync.Mutex
	keys    []*keyRecord // payment.charge keys, whatever their path
	adjusts []*keyRecord // balance.adjust keys
	tips    []*keyRecord // payment.tip keys (gRPC Payments/Tip, a plain handler)
	likes   map[likeRecord]bool
	paths   map[string]int // logical operations started per path
	ops     []op
}

func newTraffic(url string, apiKeys map[string]string, tenants []string, rate float64, seed int64, fault func() string,
	hist *history.Recorder, cc *grpc.ClientConn) *traffic {
	hc := &http.Client{Timeout: 20 * time.Second}
	return &traffic{url: url, apiKeys: apiKeys, tenants: tenants, rate: rate, fault: fault, hist: hist, hc: hc, grpc: cc,
		likes: map[likeRecord]bool{}, paths: map[string]int{},
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x7261666669632d31)),
		client: &idemclient.Client{HTTP: hc, MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second},
		once:   &idemclient.Client{HTTP: hc, MaxAttempts: 1}}
}

var (
	payees     = []string{"acme-books", "blue-coffee", "city-metro", "declined-shop"}
	currencies = []string{"CNY", "CNY", "USD", "JPY", "IDR", "BHD"}
)

// run starts new logical operations at the rate until ctx ends, down every path the world
// offers: payments over HTTP, gRPC and the one-time-token checkout, likes and unlikes,
// balance adjustments; at most 32 run at once.
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
		start := func(path string, f func()) {
			t.mu.Lock()
			t.paths[path]++
			t.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				f()
			}()
		}
		switch p := t.rng.Float64(); {
		case p < 0.12:
			// Few articles and users: flows meet on one natural key.
			l := likeRecord{Tenant: tenant, APIKey: t.apiKeys[tenant], Article: fmt.Sprintf("art-%d", t.rng.IntN(4)),
				User: fmt.Sprintf("u-%d", t.rng.IntN(12))}
			steps := []bool{true}
			for t.rng.IntN(2) == 0 && len(steps) < 4 {
				steps = append(steps, t.rng.IntN(2) == 0)
			}
			t.mu.Lock()
			t.likes[l] = true
			t.mu.Unlock()
			start(PathLikes, func() { t.likeFlow(ctx, l, steps) })
			continue
		case p < 0.20:
			amount := 100 * (1 + t.rng.IntN(50))
			if t.rng.IntN(3) == 0 {
				amount = -amount // a debit; beyond the balance it is refused, and the refusal replayed
			}
			body := map[string]any{"amount_minor": amount, "currency": "CNY", "reason": "chaos adjustment"}
			rec := &keyRecord{Path: pathAdjustmentsKey, Tenant: tenant, APIKey: t.apiKeys[tenant],
				Key: fmt.Sprintf("adj-%016x-%d", t.rng.Uint64(), n), Scenario: t.drawScenario(false)}
			rec.Body, _ = json.Marshal(body)
			t.mu.Lock()
			t.adjusts = append(t.adjusts, rec)
			t.mu.Unlock()
			start(PathAdjustments, func() { t.scenario(ctx, rec, body, "") })
			continue
		case p < 0.26 && t.grpc != nil:
			// A tip through gRPC's plain handler: one charge at the channel with no idempotency
			// of its own; in a fault window the channel fails or drops the answer of half of them.
			body := map[string]any{"amount_minor": 100 * (1 + t.rng.IntN(20)), "currency": "CNY",
				"merchant_order_no": fmt.Sprintf("chaos-tip-%d", n), "payee": payees[t.rng.IntN(len(payees))]}
			rec := &keyRecord{Path: pathTipKey, Tenant: tenant, APIKey: t.apiKeys[tenant],
				Key: fmt.Sprintf("tip-%016x-%d", t.rng.Uint64(), n), Scenario: t.drawScenario(false)}
			if f := t.fault(); (f == "error" || f == "drop-response") && t.rng.IntN(2) == 0 {
				rec.TipFault, rec.Faulted = f, true
			}
			rec.Body, _ = json.Marshal(body)
			t.mu.Lock()
			t.tips = append(t.tips, rec)
			t.mu.Unlock()
			start(PathGRPC, func() { t.scenario(ctx, rec, body, "") })
			continue
		}
		body := map[string]any{"amount_minor": 100 * (1 + t.rng.IntN(500)), "currency": currencies[t.rng.IntN(len(currencies))],
			"merchant_order_no": fmt.Sprintf("chaos-ord-%d", n), "payee": payees[t.rng.IntN(len(payees))], "description": "chaos order"}
		rec := &keyRecord{Path: PathHTTP, Tenant: tenant, APIKey: t.apiKeys[tenant], Key: fmt.Sprintf("chaos-%016x-%d", t.rng.Uint64(), n)}
		switch p := t.rng.Float64(); {
		case p < 0.2 && t.grpc != nil:
			rec.Path = PathGRPC
		case p < 0.32:
			rec.Path, rec.Key = PathCheckout, "" // the key is the token's, once issued
		}
		rec.Body, _ = json.Marshal(body)
		fault := t.fault()
		if fault != "" && t.rng.IntN(2) == 0 {
			fault = "" // half the traffic in a fault window is spared
		}
		rec.Scenario = t.drawScenario(rec.Path == PathHTTP)
		if rec.Path != PathHTTP {
			fault = "" // paysim faults ride on the payments route's header only
		}
		t.mu.Lock()
		t.keys = append(t.keys, rec)
		t.mu.Unlock()
		start(rec.Path, func() {
			if rec.Path == PathCheckout {
				tok, err := t.issueToken(ctx, rec.APIKey)
				if err != nil {
					return // no token, no key: nothing was asked
				}
				t.mu.Lock()
				rec.Token, rec.Key = tok, tokenKey(tok)
				t.mu.Unlock()
			}
			t.scenario(ctx, rec, body, fault)
			t.mu.Lock()
			rec.Done = true
			t.mu.Unlock()
		})
	}
}

// drawScenario picks what the client does with a key; a crash (the service dies after the
// charge, left to the daemon) only on the HTTP route, which has the hook.
func (t *traffic) drawScenario(crash bool) string {
	switch r := t.rng.Float64(); {
	case r < 0.03 && crash:
		return "crash"
	case r < 0.03:
		return "single"
	case r < 0.08:
		return "mismatch"
	case r < 0.18:
		return "duplicate"
	case r < 0.43:
		return "retry"
	}
	return "single"
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

// send is one logical call under rec's key, down rec's path; once makes a single attempt (a
// fault is injected).
func (t *traffic) send(ctx context.Context, rec *keyRecord, body []byte, hdr http.Header, once bool) int {
	if once {
		t.mu.Lock()
		rec.Faulted = true
		t.mu.Unlock()
	}
	start := time.Now()
	done := t.hist.Begin(history.Input{Key: rec.histKey(), Kind: history.Call, Intent: history.Intent(body)})
	var a answer
	switch rec.Path {
	case pathAdjustmentsKey:
		a = t.postAdjustment(ctx, rec, body)
	case PathGRPC, pathTipKey:
		a = t.callGRPC(ctx, rec, body)
	case PathCheckout:
		a = t.postToken(ctx, rec, body)
	default:
		a = t.postKey(ctx, rec, body, hdr, once)
	}
	o := op{tenant: rec.Tenant, end: time.Now(), latency: time.Since(start), status: a.status}
	var answer struct {
		PaymentID    string `json:"payment_id"`
		AdjustmentID string `json:"adjustment_id"`
		ChargeID     string `json:"charge_id"`
	}
	_ = json.Unmarshal(a.body, &answer)
	// Every call is in the history, one cut short by the end of the run too: it may have
	// recorded its intent.
	done(history.HTTPClass(o.status, history.ProblemType(a.body), answer.PaymentID+answer.AdjustmentID+answer.ChargeID))
	switch {
	case ctx.Err() != nil && o.status == 0:
		return 0 // the run ended under it: not an observation
	case o.status == 0 && errors.Is(a.err, context.DeadlineExceeded):
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

// answer is what one logical call got back: the last status (0: none), its body, the error.
type answer struct {
	status int
	body   []byte
	err    error
}

// postKey is POST /v1/payments with the idempotent client (retries with the same key).
func (t *traffic) postKey(ctx context.Context, rec *keyRecord, body []byte, hdr http.Header, once bool) answer {
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + rec.APIKey}}
	for k, v := range hdr {
		h[k] = v
	}
	c := t.client
	if once {
		c = t.once
	}
	res, err := c.Do(ctx, http.MethodPost, t.url+"/v1/payments", rec.Key, h, body)
	a := answer{err: err}
	if res != nil && res.Response != nil {
		a.status, a.body = res.Response.StatusCode, res.Body
	}
	return a
}

// catchUp is the client finishing what it started: every key whose last answer was a 5xx or
// none (and was not a deliberate crash left to the daemon) is sent once more with its key.
func (t *traffic) catchUp(ctx context.Context) int {
	t.mu.Lock()
	var todo []*keyRecord
	for _, r := range t.keys {
		if r.Key != "" && r.Scenario != "crash" && (r.LastStatus == 0 || r.LastStatus >= 500 || r.LastStatus == http.StatusConflict) {
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

// histKey is the history's name of the key: path, tenant and the key as stored.
func (r *keyRecord) histKey() string { return r.Path + "|" + r.Tenant + "|" + r.Key }
