// Package idemclient is the caller's side of the Idempotency-Key contract: one key per logical
// operation, generated once (or supplied by the caller) and sent verbatim on every retry.
//
// Do sends a request and retries it with the same key: capped exponential backoff with full
// jitter, Retry-After honoured on 409, 429 and 503, transport errors and other 5xx retried, any
// other 4xx returned at once. The response's Idempotent-Replayed header is surfaced as
// Result.Replayed.
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

// ErrAttemptsExhausted wraps the last error when every attempt failed to get a final answer.
var ErrAttemptsExhausted = errors.New("idemclient: attempts exhausted")

// Do sends method url body with key (generated once when empty) and retries with that same key.
// A 2xx or a non-retryable 4xx is returned as a Result; when attempts run out the last response
// (if any) is returned together with ErrAttemptsExhausted.
func (c *Client) Do(ctx context.Context, method, url, key string, header http.Header, body []byte) (*Result, error) {
	hc, maxAttempts, base, maxDelay := c.HTTP, c.MaxAttempts, c.BaseDelay, c.MaxDelay
	if hc == nil {
		hc = http.DefaultClient
	}
	if maxAttempts <= 0 {
		maxAttempts = 5
	}
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 10 * time.Second
	}
	if key == "" {
		key = NewKey()
	}
	var last *Result
	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, vs := range header {
			req.Header[k] = append([]string(nil), vs...)
		}
		req.Header.Set(HeaderKey, key)
		wait := backoff(attempt, base, maxDelay)
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
		} else {
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			resp.Body.Close()
			last = &Result{Response: resp, Body: b, Key: key, Attempts: attempt, Replayed: resp.Header.Get(HeaderReplayed) == "true"}
			lastErr = rerr
			if rerr == nil && !retryable(resp.StatusCode) {
				return last, nil
			}
			if rerr == nil {
				lastErr = fmt.Errorf("status %d", resp.StatusCode)
			}
			if ra, ok := retryAfter(resp); ok {
				wait = min(ra, maxDelay)
			}
		}
		if attempt == maxAttempts {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, ctx.Err()
		case <-t.C:
		}
	}
	return last, fmt.Errorf("%w after %d: %v", ErrAttemptsExhausted, maxAttempts, lastErr)
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
