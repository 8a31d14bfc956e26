package grpcidem

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
)

// ClientConfig tunes the client interceptor. Zero fields take the defaults.
type ClientConfig struct {
	// Methods, when set, limits the interceptor to these full method names; others pass through.
	// Set it when the connection also carries methods the server does not guard with a key: a
	// retry of those on Unavailable could act twice.
	Methods map[string]bool
	// MaxAttempts bounds the interceptor's own attempts per logical call (default 4); each may be
	// retried by gRPC itself under a service-config retry policy, always with the same key.
	MaxAttempts int
	// Backoff is the first pause between attempts (default 100 ms), doubling up to MaxBackoff
	// (default 5 s), with full jitter; a server hint (RetryInfo, retry-after) is honoured instead,
	// up to MaxHint (default 30 s).
	Backoff, MaxBackoff, MaxHint time.Duration
	// NewKey generates a key when the caller did not supply one (default: 32 random hex digits).
	NewKey func() string
}

type keyCtx struct{}

// WithKey returns a context whose calls carry key: one key per logical operation, chosen by the
// caller (for example stored with the order before the first attempt, so a restart reuses it).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// NewKey returns a fresh random key: 32 hex digits.
func NewKey() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// NewClientInterceptor returns the unary client interceptor: it attaches one key per logical call
// (the caller's, from WithKey or outgoing metadata, or one generated once) before the first
// attempt, and retries Unavailable and Aborted answers with that same key.
func NewClientInterceptor(cfg ClientConfig) grpc.UnaryClientInterceptor {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	if cfg.MaxHint <= 0 {
		cfg.MaxHint = 30 * time.Second
	}
	if cfg.NewKey == nil {
		cfg.NewKey = NewKey
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if cfg.Methods != nil && !cfg.Methods[method] {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(MetadataKey)) == 0 {
			key, _ := ctx.Value(keyCtx{}).(string)
			if key == "" {
				key = cfg.NewKey()
			}
			if err := claim.ValidateKey(key); err != nil {
				return status.Errorf(codes.InvalidArgument, "idempotency-key %v", err)
			}
			// Set once, before the first attempt: gRPC's own retries resend these headers as they are.
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
		}
		var err error
		for attempt := 1; ; attempt++ {
			var trailer metadata.MD
			// A fresh slice each time: the caller's may have spare capacity that others share.
			err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
			if err == nil || attempt >= cfg.MaxAttempts || !retryable(err) {
				return err
			}
			wait := cfg.pause(attempt, err, trailer)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return err // the hint does not fit the caller's deadline: answer what we have
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
}

// retryable: the call may be sent again with the same key. Unavailable (transport or downstream)
// and Aborted (in progress, lease lost) are; everything else is an answer.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted:
		return true
	}
	return false
}

// pause is the server's hint when it gave one, else capped exponential backoff with full jitter.
func (cfg ClientConfig) pause(attempt int, err error, trailer metadata.MD) time.Duration {
	hint := RetryDelay(err)
	if v := trailer.Get(MetadataRetryAfter); hint == 0 && len(v) == 1 {
		if s, perr := strconv.Atoi(v[0]); perr == nil && s > 0 {
			hint = time.Duration(s) * time.Second
		}
	}
	if hint > 0 {
		return min(hint, cfg.MaxHint)
	}
	d := min(cfg.Backoff<<min(attempt-1, 16), cfg.MaxBackoff)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}
