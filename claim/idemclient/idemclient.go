// Package idemclient is the caller's side of the Idempotency-Key contract: one key per logical
// operation, generated once (or supplied by the caller) and sent verbatim on every retry.
//
// Two forms share one retry loop: Transport, an http.RoundTripper to put under any
// http.Client, and Client.Do, a helper that also reads the body. Both retry with the same key:
// capped exponential backoff with full jitter, Retry-After honoured on 409, 429 and 503,
// transport errors and other 5xx retried, any other 4xx returned at once, and a replayed answer
// (Idempotent-Replayed: true) returned at once whatever its status — it is the stored answer,
// a retry would only get it again. Replayed reports the replay marker of a response.
package idemclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// HeaderKey and HeaderReplayed are the header names httpidem uses.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// MaxBodyBytes bounds a request body the retry loop keeps for resending.
const MaxBodyBytes = 8 << 20

// Client retries requests under one idempotency key each.
type Client struct {
	HTTP        *http.Client  // default http.DefaultClient
	MaxAttempts int           // default 5
	BaseDelay   time.Duration // default 100ms
	MaxDelay    time.Duration // cap for backoff and Retry-After; default 10s
}

// Result is the final answer of Do.
type Result struct {
	Response *http.Response // body fully read into Body; Response.Body is closed
	Body     []byte
	Key      string
	Attempts int
	Replayed bool
}

// NewKey returns a fresh random key (32 hex characters) for one logical operation.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Replayed says whether resp is a stored answer replayed by the server.
func Replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(HeaderReplayed) == "true"
}

// ErrAttemptsExhausted wraps the last error when every attempt failed to get a final answer.
var ErrAttemptsExhausted = errors.New("idemclient: attempts exhausted")

// retryPolicy is the retry loop's bounds, defaults filled in one place.
type retryPolicy struct {
	maxAttempts    int
	base, maxDelay time.Duration
}

func newPolicy(maxAttempts int, base, maxDelay time.Duration) retryPolicy {
	if maxAttempts <= 0 {
		maxAttempts = 5
	}
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 10 * time.Second
	}
	return retryPolicy{maxAttempts, base, maxDelay}
}

// run sends newReq() until an answer is final or attempts run out. It returns the final
// response with its body open (or the last retryable one, when attempts ran out, with
// exhausted set), the number of attempts, and a transport error when no response came back.
func (p retryPolicy) run(ctx context.Context, newReq func() (*http.Request, error),
	send func(*http.Request) (*http.Response, error)) (resp *http.Response, attempts int, exhausted bool, err error) {
	for attempt := 1; ; attempt++ {
		req, err := newReq()
		if err != nil {
			return nil, attempt - 1, false, err
		}
		wait := backoff(attempt, p.base, p.maxDelay)
		resp, err := send(req)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, attempt, false, ctx.Err()
		case err != nil && attempt == p.maxAttempts:
			return nil, attempt, true, fmt.Errorf("%w after %d: %v", ErrAttemptsExhausted, attempt, err)
		case err == nil && (!retryable(resp.StatusCode) || Replayed(resp)):
			return resp, attempt, false, nil
		case err == nil && attempt == p.maxAttempts:
			return resp, attempt, true, nil
		case err == nil:
			if ra, ok := retryAfter(resp); ok {
				wait = min(ra, p.maxDelay)
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, false, ctx.Err()
		case <-t.C:
		}
	}
}

// Do sends method url body with key (generated once when empty) and retries with that same key.
// A 2xx, a non-retryable 4xx or a replayed answer is returned as a Result; when attempts run out
// the last response (if any) is returned together with ErrAttemptsExhausted.
func (c *Client) Do(ctx context.Context, method, url, key string, header http.Header, body []byte) (*Result, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	if key == "" {
		key = NewKey()
	}
	newReq := func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, vs := range header {
			req.Header[k] = append([]string(nil), vs...)
		}
		req.Header.Set(HeaderKey, key)
		return req, nil
	}
	resp, attempts, exhausted, err := newPolicy(c.MaxAttempts, c.BaseDelay, c.MaxDelay).run(ctx, newReq, hc.Do)
	if resp == nil {
		return nil, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	resp.Body.Close()
	res := &Result{Response: resp, Body: b, Key: key, Attempts: attempts, Replayed: Replayed(resp)}
	switch {
	case rerr != nil:
		return res, rerr
	case exhausted:
		return res, fmt.Errorf("%w after %d: status %d", ErrAttemptsExhausted, attempts, resp.StatusCode)
	}
	return res, nil
}

// Transport is an http.RoundTripper that makes every POST and PATCH (the methods that are not
// idempotent by themselves; Methods overrides) one logical operation: it sends the request's own
// Idempotency-Key, or generates one once, and retries with that key. Other methods pass through
// once. The final response is returned as is — a 4xx or the last 5xx is a response, not an
// error; Replayed(resp) tells a replayed answer and resp.Request carries the key sent.
type Transport struct {
	Base        http.RoundTripper // default http.DefaultTransport
	MaxAttempts int               // default 5
	BaseDelay   time.Duration     // default 100ms
	MaxDelay    time.Duration     // cap for backoff and Retry-After; default 10s
	Methods     []string          // default POST, PATCH
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !t.applies(req.Method) {
		return base.RoundTrip(req)
	}
	body, err := replayableBody(req)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(HeaderKey)
	if key == "" {
		key = NewKey()
	}
	ctx := req.Context()
	newReq := func() (*http.Request, error) {
		r := req.Clone(ctx)
		r.Header.Set(HeaderKey, key)
		if body != nil {
			r.Body, _ = body()
		}
		return r, nil
	}
	resp, _, _, err := newPolicy(t.MaxAttempts, t.BaseDelay, t.MaxDelay).run(ctx, newReq, base.RoundTrip)
	return resp, err
}

func (t *Transport) applies(method string) bool {
	methods := t.Methods
	if len(methods) == 0 {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range methods {
		if m == method {
			return true
		}
	}
	return false
}

// replayableBody returns a way to get req's body afresh for every attempt (nil: no body): the
// request's GetBody when it has one, else the body read once (bounded) and closed, as a
// RoundTripper must.
func replayableBody(req *http.Request) (func() (io.ReadCloser, error), error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		req.Body.Close()
		return req.GetBody, nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("idemclient: read request body: %w", err)
	}
	if len(b) > MaxBodyBytes {
		return nil, fmt.Errorf("idemclient: request body over %d bytes cannot be kept for retries", MaxBodyBytes)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, nil
}

// retryable: 409 (in progress), 429, and 5xx; every other status is final.
func retryable(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}

// backoff is full jitter over base·2^(attempt-1), capped.
func backoff(attempt int, base, cap time.Duration) time.Duration {
	d := base << min(attempt-1, 20)
	if d <= 0 || d > cap {
		d = cap
	}
	return time.Duration(mrand.Int64N(int64(d)) + 1)
}

// retryAfter reads Retry-After in seconds (the form httpidem sends) on 409, 429 and 503.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
	default:
		return 0, false
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s < 0 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}
