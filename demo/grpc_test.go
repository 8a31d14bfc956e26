package demo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// grpcClient is a real gRPC client over a real loopback connection to the demo world.
type grpcClient struct {
	t  *testing.T
	e  *env
	cc *grpc.ClientConn
}

func (e *env) grpc(opts ...grpc.DialOption) *grpcClient {
	e.t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json"))}, opts...)
	cc, err := grpc.NewClient(e.w.GRPCAddr, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cc.Close() })
	return &grpcClient{t: e.t, e: e, cc: cc}
}

type grpcReply struct {
	reply   *demo.ChargeReply
	err     error
	trailer metadata.MD
}

func (r grpcReply) replayed() bool { return grpcidem.Replayed(r.trailer) }

// charge calls Charge as the tenant of apiKey, with key ("" sends none).
func (c *grpcClient) charge(apiKey, key string, in demo.ChargeRequest, opts ...grpc.CallOption) grpcReply {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiKey)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.MetadataKey, key)
	}
	r := grpcReply{reply: new(demo.ChargeReply)}
	r.err = c.cc.Invoke(ctx, demo.GRPCChargeMethod, &in, r.reply, append(opts, grpc.Trailer(&r.trailer))...)
	return r
}

var grpcCharge = demo.ChargeRequest{AmountMinor: 1234, Currency: "CNY", MerchantOrderNo: "ord-1", Payee: "alice",
	Description: "book", ClientTS: "2026-12-02T10:00:00Z"}

func wantGRPC(t *testing.T, r grpcReply, code codes.Code, reason string) {
	t.Helper()
	if status.Code(r.err) != code || grpcidem.Reason(r.err) != reason {
		t.Fatalf("want %s %s, got %v (reason %q)", code, reason, r.err, grpcidem.Reason(r.err))
	}
}

func TestGRPC_ChargeReplayConflictAndScope(t *testing.T) {
	e := start(t, paysim.Config{Seed: 11})
	c := e.grpc()
	first := c.charge(e.key, "g-1", grpcCharge)
	if first.err != nil || first.reply.Status != "succeeded" || first.reply.AmountMinor != 1234 || first.replayed() {
		t.Fatalf("first: %+v %v", first.reply, first.err)
	}
	retry := grpcCharge
	retry.ClientTS = "2026-12-02T10:00:05Z" // not intent
	again := c.charge(e.key, "g-1", retry)
	if again.err != nil || *again.reply != *first.reply || !again.replayed() {
		t.Fatalf("replay: %+v %v %v", again.reply, again.err, again.trailer)
	}
	changed := grpcCharge
	changed.AmountMinor = 1300
	wantGRPC(t, c.charge(e.key, "g-1", changed), codes.FailedPrecondition, grpcidem.ReasonKeyReused)
	wantGRPC(t, c.charge(e.key, "", grpcCharge), codes.InvalidArgument, grpcidem.ReasonKeyMissing)
	wantGRPC(t, c.charge(e.key, strings.Repeat("x", 256), grpcCharge), codes.InvalidArgument, grpcidem.ReasonKeyMalformed)
	wantGRPC(t, c.charge("sk_not_a_key", "g-1", grpcCharge), codes.Unauthenticated, grpcidem.ReasonUnauthenticated)

	// Another tenant sending the same key string gets its own key: a charge of its own, never
	// acme's answer.
	other := c.charge(e.w.APIKey("globex"), "g-1", grpcCharge)
	if other.err != nil || other.replayed() || other.reply.PaymentID == first.reply.PaymentID {
		t.Fatalf("globex with acme's key: %+v %v", other.reply, other.err)
	}
	for _, tenant := range []string{"acme", "globex"} {
		if n := e.w.Paysim.ChargeCount(claim.DownstreamKey(tenant, demo.OperationCharge, "g-1")); n != 1 {
			t.Fatalf("%s: %d charges at paysim", tenant, n)
		}
	}
	// One contract across transports: the same key over HTTP replays the gRPC charge.
	h := e.pay("g-1", body)
	if h.status != 201 || h.header.Get("Idempotent-Replayed") != "true" || h.body["payment_id"] != first.reply.PaymentID {
		t.Fatalf("HTTP replay of the gRPC charge: %+v", h)
	}
}

func TestGRPC_RefusalIsNotStoredButADeclineIsReplayed(t *testing.T) {
	e := start(t, paysim.Config{Seed: 12, DeclinePayees: []string{"mallory"}})
	c := e.grpc()
	bad := grpcCharge
	bad.AmountMinor = -5
	r := c.charge(e.key, "g-v", bad)
	wantGRPC(t, r, codes.InvalidArgument, grpcidem.ReasonInvalidField)
	named := false
	for _, d := range status.Convert(r.err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) == 1 && br.FieldViolations[0].Field == "amount_minor" {
			named = true
		}
	}
	if !named {
		t.Fatalf("refusal does not name amount_minor: %v", status.Convert(r.err).Details())
	}
	if ok := c.charge(e.key, "g-v", grpcCharge); ok.err != nil || ok.replayed() {
		t.Fatalf("corrected request under the same key: %v", ok.err)
	}

	declined := grpcCharge
	declined.Payee = "mallory"
	d1 := c.charge(e.key, "g-d", declined)
	d2 := c.charge(e.key, "g-d", declined)
	wantGRPC(t, d1, codes.FailedPrecondition, grpcidem.ReasonRequestFailed)
	wantGRPC(t, d2, codes.FailedPrecondition, grpcidem.ReasonRequestFailed)
	if d1.replayed() || !d2.replayed() || !strings.Contains(status.Convert(d2.err).Message(), "402") {
		t.Fatalf("decline: %v / %v (replayed %v)", d1.err, d2.err, d2.replayed())
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", demo.OperationCharge, "g-d")); n != 1 {
		t.Fatalf("%d declined charges at paysim", n)
	}
}

func TestGRPC_InProgressIsAbortedWithARetryHint(t *testing.T) {
	e := start(t, paysim.Config{Seed: 13, Latency: time.Second})
	c := e.grpc()
	first := make(chan grpcReply, 1)
	go func() { first <- c.charge(e.key, "g-slow", grpcCharge) }()
	pgtest.Await(t, e.store.DB(), 5*time.Second, "the first call's claim", func() bool {
		var n int64
		e.store.DB().Raw(`SELECT count(*) FROM idempotency_keys WHERE key = 'g-slow'`).Scan(&n)
		return n == 1
	}, "idempotency_keys")
	r := c.charge(e.key, "g-slow", grpcCharge)
	wantGRPC(t, r, codes.Aborted, grpcidem.ReasonInProgress)
	if grpcidem.RetryDelay(r.err) < time.Second || len(r.trailer.Get(grpcidem.MetadataRetryAfter)) != 1 {
		t.Fatalf("in progress without a retry hint: %v %v", r.err, r.trailer)
	}
	if f := <-first; f.err != nil || f.replayed() {
		t.Fatalf("first: %v", f.err)
	}
}

func TestGRPC_RacingDuplicatesChargeOnce(t *testing.T) {
	e := start(t, paysim.Config{Seed: 15, Latency: 300 * time.Millisecond})
	c := e.grpc()
	var wg sync.WaitGroup
	replies := make(chan grpcReply, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies <- c.charge(e.key, "g-race", grpcCharge)
		}()
	}
	wg.Wait()
	close(replies)
	executed := 0
	ids := map[string]bool{}
	for r := range replies {
		switch {
		case r.err == nil:
			ids[r.reply.PaymentID] = true
			if !r.replayed() {
				executed++
			}
		case status.Code(r.err) == codes.Aborted && grpcidem.Reason(r.err) == grpcidem.ReasonInProgress:
		default:
			t.Fatalf("racing duplicate: %v", r.err)
		}
	}
	// However the race fell (answers after the first completion replay), one call executed.
	if executed != 1 || len(ids) != 1 {
		t.Fatalf("%d calls executed, %d payment ids", executed, len(ids))
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", demo.OperationCharge, "g-race")); n != 1 {
		t.Fatalf("%d charges at paysim", n)
	}
	// The client interceptor with the caller's key gets the stored answer, marked replayed.
	ci := e.grpc(grpc.WithChainUnaryInterceptor(grpcidem.NewClientInterceptor(grpcidem.ClientConfig{})))
	ctx := grpcidem.WithKey(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+e.key), "g-race")
	reply := new(demo.ChargeReply)
	var trailer metadata.MD
	if err := ci.cc.Invoke(ctx, demo.GRPCChargeMethod, &grpcCharge, reply, grpc.Trailer(&trailer)); err != nil ||
		!ids[reply.PaymentID] || !grpcidem.Replayed(trailer) {
		t.Fatalf("client interceptor: %v %+v", err, reply)
	}
}

// rawJSON sends its bytes as they are, under the "json" content subtype.
type rawJSON struct{}

func (rawJSON) Name() string                       { return "json" }
func (rawJSON) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawJSON) Unmarshal(data []byte, v any) error { return nil }

func TestGRPC_HostileMessagesAreInvalidArgument(t *testing.T) {
	e := start(t, paysim.Config{Seed: 14})
	c := e.grpc()
	big := grpcCharge
	big.Description = strings.Repeat("x", 20<<10)
	if r := c.charge(e.key, "g-big", big); status.Code(r.err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v", r.err)
	}
	for name, msg := range map[string][]byte{
		"not JSON":      []byte(`{"amount_minor": 12`),
		"invalid UTF-8": []byte("{\"amount_minor\": 1234, \"currency\": \"CNY\", \"payee\": \"\xff\"}"),
		"NUL in field":  []byte(`{"amount_minor": 1234, "currency": "CNY", "payee": "al\u0000ice"}`),
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+e.key, grpcidem.MetadataKey, "g-"+name)
		err := c.cc.Invoke(ctx, demo.GRPCChargeMethod, msg, new(demo.ChargeReply), grpc.ForceCodec(rawJSON{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Payments/Tip is a plain handler: the interceptor claims its key, the handler charges the
// channel itself (no idempotency at the channel: the key's downstream key is only the order
// number), and a retry under the key replays the stored answer instead of charging again.
func TestGRPC_TipIsAPlainHandlerReplayedUnderItsKey(t *testing.T) {
	e := start(t, paysim.Config{Seed: 12})
	c := e.grpc()
	tip := demo.ChargeRequest{AmountMinor: 300, Currency: "CNY", MerchantOrderNo: "tip-1", Payee: "alice"}
	call := func() (*demo.TipReply, metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.key, grpcidem.MetadataKey, "tip-key-1")
		var reply demo.TipReply
		var trailer metadata.MD
		err := c.cc.Invoke(ctx, demo.GRPCTipMethod, &tip, &reply, grpc.Trailer(&trailer))
		return &reply, trailer, err
	}
	first, _, err := call()
	if err != nil || first.Status != "succeeded" || first.ChargeID == "" {
		t.Fatalf("first tip: %+v %v", first, err)
	}
	again, trailer, err := call()
	if err != nil || *again != *first || !grpcidem.Replayed(trailer) {
		t.Fatalf("retry: %+v %v replayed %v", again, err, grpcidem.Replayed(trailer))
	}
	if n := e.w.Paysim.ChargeCount(claim.DownstreamKey("acme", demo.OperationTip, "tip-key-1")); n != 1 {
		t.Fatalf("%d charges at the channel for one tip key, want 1", n)
	}
}
