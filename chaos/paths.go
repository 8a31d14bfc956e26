package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/demo"
)

// The paths of the world the traffic walks, by their names in report.json's "paths".
const (
	PathHTTP           = "http"                  // POST /v1/payments with an Idempotency-Key
	PathGRPC           = "grpc"                  // Payments/Charge over gRPC, the same charge Operation
	PathOutbox         = "outbox_non_idempotent" // outbox rows to a receiver that does not dedupe
	PathCheckout       = "checkout_token"        // POST /v1/checkout with a one-time token
	PathLikes          = "likes"                 // likes and unlikes (a natural key on demo_likes)
	PathAdjustments    = "adjustments"           // balance adjustments (the one-commit path)
	PathConsumer       = "consumer"              // payment events consumed (fulfillment, shipping)
	PathPurgedRetried  = "purged_then_retried"   // keys purged by retention, then retried late
	pathAdjustmentsKey = "adjust"                // history prefix of an adjustment key
	pathTipKey         = "grpc-tip"              // a tip: gRPC Payments/Tip, a plain handler
)

// dialPayments is one gRPC connection to every payments replica, round robin (a killed one is
// skipped until it is back), with the idempotent client interceptor: one key per logical call,
// Unavailable and Aborted retried with it.
func dialPayments(addrs []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("chaos")
	var as []resolver.Address
	for _, a := range addrs {
		as = append(as, resolver.Address{Addr: a})
	}
	r.InitialState(resolver.State{Addresses: as})
	return grpc.NewClient(r.Scheme()+":///payments", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")),
		grpc.WithUnaryInterceptor(grpcidem.NewClientInterceptor(grpcidem.ClientConfig{
			MaxAttempts: 8, Backoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second, MaxHint: 5 * time.Second})))
}

// callGRPC is one logical Charge over gRPC under rec's key, answered as the HTTP route would
// be (status and body), so one classification serves both transports.
func (t *traffic) callGRPC(ctx context.Context, rec *keyRecord, body []byte) answer {
	var in demo.ChargeRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return answer{status: http.StatusBadRequest, err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cctx = grpcidem.WithKey(metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer "+rec.APIKey), rec.Key)
	method, reply := demo.GRPCChargeMethod, any(new(demo.ChargeReply))
	if rec.Path == pathTipKey {
		method, reply = demo.GRPCTipMethod, new(demo.TipReply)
		if rec.TipFault != "" { // on every attempt of the logical call
			cctx = metadata.AppendToOutgoingContext(cctx, demo.MetadataPaysimFault, rec.TipFault)
		}
	}
	err := t.grpc.Invoke(cctx, method, &in, reply)
	problem := func(st int, typ string) answer {
		return answer{status: st, body: []byte(fmt.Sprintf(`{"type":"/problems/%s"}`, typ)), err: err}
	}
	switch reason := grpcidem.Reason(err); {
	case err == nil:
		b, _ := json.Marshal(reply)
		return answer{status: http.StatusCreated, body: b}
	case reason == grpcidem.ReasonKeyReused:
		return problem(http.StatusUnprocessableEntity, "key-reused")
	case reason == grpcidem.ReasonResultExpired:
		return problem(http.StatusGone, "result-expired")
	case reason == grpcidem.ReasonRequestFailed:
		return problem(http.StatusPaymentRequired, "request-failed")
	case reason == grpcidem.ReasonInProgress:
		return problem(http.StatusConflict, "request-in-progress")
	case status.Code(err) == codes.InvalidArgument:
		return problem(http.StatusBadRequest, "invalid-request")
	case status.Code(err) == codes.Unauthenticated:
		return problem(http.StatusUnauthorized, "unauthenticated")
	case status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Canceled:
		return answer{err: context.DeadlineExceeded}
	}
	return problem(http.StatusServiceUnavailable, "unavailable")
}

// issueToken asks the checkout for a one-time token (a few tries: a replica may be down).
func (t *traffic) issueToken(ctx context.Context, apiKey string) (string, error) {
	var last error
	for attempt := range 5 {
		if attempt > 0 {
			if err := sleepCtx(ctx, time.Duration(200<<attempt)*time.Millisecond); err != nil {
				return "", err
			}
		}
		st, b, err := t.post(ctx, t.url+"/v1/checkout/tokens", http.Header{"Authorization": {"Bearer " + apiKey}}, nil)
		if err == nil && st == http.StatusCreated {
			var tok struct {
				Token string `json:"token"`
			}
			if err := json.Unmarshal(b, &tok); err != nil || tok.Token == "" {
				return "", fmt.Errorf("token answer %q", b)
			}
			return tok.Token, nil
		}
		last = fmt.Errorf("status %d: %v", st, err)
	}
	return "", last
}

// tokenKey is the idempotency key a one-time token stands for (httpidem.Tokens).
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:])
}

// postToken is POST /v1/checkout with rec's one-time token, retried with the same token on no
// answer, a 5xx, 409 and 429 (at most 8 attempts, backoff up to 2 s).
func (t *traffic) postToken(ctx context.Context, rec *keyRecord, body []byte) answer {
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + rec.APIKey}, "Idempotency-Token": {rec.Token}}
	return t.retried(ctx, func() answer {
		st, b, err := t.post(ctx, t.url+"/v1/checkout", h, body)
		return answer{status: st, body: b, err: err}
	})
}

// retried runs call until it answers something other than no answer, a 5xx, 409 or 429, at
// most 8 times with a capped backoff.
func (t *traffic) retried(ctx context.Context, call func() answer) answer {
	var a answer
	for attempt := range 8 {
		if attempt > 0 {
			if err := sleepCtx(ctx, min(time.Duration(100<<attempt)*time.Millisecond, 2*time.Second)); err != nil {
				return a
			}
		}
		a = call()
		if a.status != 0 && a.status < 500 && a.status != http.StatusConflict && a.status != http.StatusTooManyRequests {
			return a
		}
	}
	return a
}

// post sends one request through the proxy and reads the answer (bounded).
func (t *traffic) post(ctx context.Context, url string, h http.Header, body []byte) (int, []byte, error) {
	return t.do(ctx, http.MethodPost, url, h, body)
}

func (t *traffic) do(ctx context.Context, method, url string, h http.Header, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := t.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, b, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// likeRecord is one (tenant, article, user): the natural key of a like.
type likeRecord struct {
	Tenant, APIKey, Article, User string
}

func (l likeRecord) histKey() string {
	return PathLikes + "|" + l.Tenant + "|" + l.Article + "|" + l.User
}

// likeFlow likes, maybe unlikes, maybe likes again — each one attempt (a retried unlike would
// be two actions, not one), recorded in the history as set operations on the natural key.
// Flows share a small space of articles and users, so many meet on one key at once.
func (t *traffic) likeFlow(ctx context.Context, l likeRecord, steps []bool) {
	h := http.Header{"Authorization": {"Bearer " + l.APIKey}, "Content-Type": {"application/json"}}
	for _, like := range steps {
		if like {
			done := t.hist.Begin(history.Input{Key: l.histKey(), Kind: history.Like})
			body, _ := json.Marshal(map[string]string{"user_id": l.User})
			st, b, _ := t.post(ctx, t.url+"/v1/articles/"+l.Article+"/likes", h, body)
			var got demo.Like
			_ = json.Unmarshal(b, &got)
			switch st {
			case http.StatusCreated:
				done(history.Output{Class: history.Final, Answer: fmt.Sprintf("created %d", got.ID)})
			case http.StatusOK:
				done(history.Output{Class: history.Final, Answer: fmt.Sprintf("exists %d", got.ID)})
			case http.StatusBadRequest, http.StatusUnauthorized:
				done(history.Output{Class: history.Refused})
			default:
				done(history.Output{Class: history.Unknown})
			}
			continue
		}
		done := t.hist.Begin(history.Input{Key: l.histKey(), Kind: history.Unlike})
		st, _, _ := t.do(ctx, http.MethodDelete, t.url+"/v1/articles/"+l.Article+"/likes/"+l.User, h, nil)
		switch st {
		case http.StatusNoContent:
			done(history.Output{Class: history.Final, Answer: "removed"})
		case http.StatusNotFound:
			done(history.Output{Class: history.Final, Answer: "absent"})
		case http.StatusBadRequest, http.StatusUnauthorized:
			done(history.Output{Class: history.Refused})
		default:
			done(history.Output{Class: history.Unknown})
		}
	}
}

// postAdjustment is POST /v1/balance/adjustments with the idempotent client.
func (t *traffic) postAdjustment(ctx context.Context, rec *keyRecord, body []byte) answer {
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + rec.APIKey}}
	res, err := t.client.Do(ctx, http.MethodPost, t.url+"/v1/balance/adjustments", rec.Key, h, body)
	a := answer{err: err}
	if res != nil && res.Response != nil {
		a.status, a.body = res.Response.StatusCode, res.Body
	}
	return a
}
