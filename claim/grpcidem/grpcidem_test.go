package grpcidem_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) {
	encoding.RegisterCodec(grpcidem.JSONCodec{})
	pgtest.Main(m)
}

const chargeMethod = "/grpcidem.test.Payments/Charge"

type chargeReq struct {
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Payee       string `json:"payee"`
	Description string `json:"description,omitempty"`
	// Outcome steers the test handler: "" succeeds, decline, flaky, block, tx, panic, and the
	// errors that leave an outside effect unknown: unavailable, deadline, internal, plain.
	Outcome string `json:"outcome,omitempty"`
}

type chargeReply struct {
	PaymentID string `json:"payment_id"`
	Status    string `json:"status"`
}

// payments is the handler under test: a generic gRPC handler, unaware of keys.
type payments struct {
	db      *gorm.DB
	calls   atomic.Int64
	flakes  atomic.Int64
	release chan struct{}
	called  chan struct{} // a signal per call, for tests that wait for the handler
}

func (p *payments) charge(ctx context.Context, in *chargeReq) (*chargeReply, error) {
	n := p.calls.Add(1)
	select {
	case p.called <- struct{}{}:
	default:
	}
	reply := &chargeReply{PaymentID: fmt.Sprintf("pay_%d", n), Status: "succeeded"}
	switch in.Outcome {
	case "decline":
		return nil, status.Error(codes.FailedPrecondition, "card declined")
	case "flaky":
		if p.flakes.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "database restarting")
		}
	case "block":
		<-p.release
	case "panic":
		panic("handler bug")
	case "unavailable": // the channel timed out: the charge may have gone through
		return nil, status.Error(codes.Unavailable, "channel timed out")
	case "deadline":
		return nil, status.Error(codes.DeadlineExceeded, "channel too slow")
	case "internal":
		return nil, status.Error(codes.Internal, "channel answered garbage")
	case "plain":
		return nil, errors.New("read tcp: connection reset by peer")
	case "tx":
		err := p.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`INSERT INTO grpc_test_payments (id) VALUES (?)`, reply.PaymentID).Error; err != nil {
				return err
			}
			return grpcidem.Complete(ctx, tx, reply)
		})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return reply, nil
}

// serviceDesc is written by hand (no protoc): one unary method carrying Go structs as JSON.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "grpcidem.test.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(chargeReq)
		if err := dec(in); err != nil {
			return nil, status.Error(codes.InvalidArgument, "unreadable request message")
		}
		h := func(ctx context.Context, req any) (any, error) { return srv.(*payments).charge(ctx, req.(*chargeReq)) }
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
	}}},
}

type world struct {
	t     *testing.T
	db    *gorm.DB
	pay   *payments
	addr  string
	conn  *grpc.ClientConn
	keys  chan string // keys seen by the server, attempt by attempt
	fails atomic.Int64
	// answers records the replays and refusals the interceptor answers (flushed by the test).
	answers *claim.AnswerRecorder
}

// newWorld serves the test service on loopback behind a recorder (which can fail the first
// calls with Unavailable, before anything is claimed) and the idempotency interceptor; tweaks
// change the store's configuration or the method's contract.
func newWorld(t *testing.T, tweaks ...func(*claim.Config, *grpcidem.Method)) *world {
	t.Parallel()
	db := pgtest.New(t)
	pgtest.Exec(t, db, `CREATE TABLE grpc_test_payments (id text PRIMARY KEY)`)
	cfg := claim.Config{DigestSecret: []byte("0123456789abcdef-secret")}
	method := grpcidem.Method{
		Operation:     "payment.charge",
		Intent:        claim.IntentSpec{Ignore: []string{"description"}, AmountField: "amount_minor", CurrencyField: "currency"},
		Transactional: true,
		Response:      func() any { return new(chargeReply) },
		ResourceID:    func(r any) string { return r.(*chargeReply).PaymentID },
		Validate: []grpcidem.Validator{func(b []byte) error {
			if strings.Contains(string(b), `"amount_minor":0`) || strings.Contains(string(b), `"amount_minor":-`) {
				return grpcidem.NewRefusal("amount_minor", "must be a positive integer")
			}
			return nil
		}},
	}
	for _, tweak := range tweaks {
		tweak(&cfg, &method)
	}
	store, err := claim.NewStore(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, db: db, pay: &payments{db: db, release: make(chan struct{}), called: make(chan struct{}, 100)}, keys: make(chan string, 100),
		answers: claim.NewAnswerRecorder(db, claim.AnswerRecorderConfig{FlushEvery: time.Hour})}
	tokens := map[string]string{"tok-a": "tenant-a", "tok-b": "tenant-b"}
	idem, err := grpcidem.NewServerInterceptor(grpcidem.Config{Store: store, Service: "test", Answers: w.answers,
		Tenant: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("authorization"); len(v) == 1 {
				if t, ok := tokens[strings.TrimPrefix(v[0], "Bearer ")]; ok {
					return t, nil
				}
			}
			return "", errors.New("unknown token")
		},
		Methods: map[string]grpcidem.Method{chargeMethod: method}})
	if err != nil {
		t.Fatal(err)
	}
	recorder := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		w.keys <- strings.Join(md.Get(grpcidem.MetadataKey), ",")
		if w.fails.Add(-1) >= 0 {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recorder, idem))
	srv.RegisterService(&serviceDesc, w.pay)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	w.addr = l.Addr().String()
	w.conn = w.dial()
	return w
}

func (w *world) dial(opts ...grpc.DialOption) *grpc.ClientConn {
	w.t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json"))}, opts...)
	cc, err := grpc.NewClient(w.addr, opts...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

type result struct {
	reply   *chargeReply
	err     error
	trailer metadata.MD
}

func (r result) replayed() bool { return grpcidem.Replayed(r.trailer) }

// call invokes Charge on cc with a token and key values (none when keys is empty).
func (w *world) call(cc *grpc.ClientConn, token string, keys []string, in chargeReq) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := []string{}
	if token != "" {
		kv = append(kv, "authorization", "Bearer "+token)
	}
	for _, k := range keys {
		kv = append(kv, grpcidem.MetadataKey, k)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	r := result{reply: new(chargeReply)}
	r.err = cc.Invoke(ctx, chargeMethod, &in, r.reply, grpc.Trailer(&r.trailer))
	return r
}

var pay = chargeReq{AmountMinor: 1234, Currency: "CNY", Payee: "alice", Description: "book"}

func wantStatus(t *testing.T, r result, code codes.Code, reason string) {
	t.Helper()
	if got := status.Code(r.err); got != code || grpcidem.Reason(r.err) != reason {
		t.Fatalf("want %s %s, got %s %q (%v)", code, reason, got, grpcidem.Reason(r.err), r.err)
	}
}

func TestServer_CompletedCallIsReplayedWithMarker(t *testing.T) {
	w := newWorld(t)
	first := w.call(w.conn, "tok-a", []string{"k-1"}, pay)
	if first.err != nil || first.reply.PaymentID != "pay_1" || first.replayed() {
		t.Fatalf("first: %+v %v", first.reply, first.err)
	}
	other := pay
	other.Description = "another description (no intent)"
	again := w.call(w.conn, "tok-a", []string{"k-1"}, other)
	if again.err != nil || *again.reply != *first.reply || !again.replayed() {
		t.Fatalf("replay: %+v %v %v", again.reply, again.err, again.trailer)
	}
	if n := w.pay.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	// The same key of another tenant is another key.
	if r := w.call(w.conn, "tok-b", []string{"k-1"}, pay); r.err != nil || r.reply.PaymentID != "pay_2" || r.replayed() {
		t.Fatalf("tenant b: %+v %v", r.reply, r.err)
	}
}

func TestServer_ReplaysAndReusedKeysAreRecordedAfterAFlush(t *testing.T) {
	w := newWorld(t)
	if r := w.call(w.conn, "tok-a", []string{"k-rec"}, pay); r.err != nil {
		t.Fatal(r.err)
	}
	for i := 0; i < 2; i++ {
		if r := w.call(w.conn, "tok-a", []string{"k-rec"}, pay); r.err != nil || !r.replayed() {
			t.Fatalf("replay: %v", r.err)
		}
	}
	changed := pay
	changed.AmountMinor++
	wantStatus(t, w.call(w.conn, "tok-a", []string{"k-rec"}, changed), codes.FailedPrecondition, grpcidem.ReasonKeyReused)
	var n int64
	w.db.Raw(`SELECT count(*) FROM key_answers`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d answers written before the flush: the answering path must not write them", n)
	}
	if err := w.answers.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Kind   string
		Status int
		Count  int64
	}
	w.db.Raw(`SELECT kind, status, count FROM key_answers ORDER BY kind`).Scan(&rows)
	if len(rows) != 2 || rows[0].Kind != "mismatch" || rows[0].Status != 422 || rows[0].Count != 1 ||
		rows[1].Kind != "replay" || rows[1].Status != 200 || rows[1].Count != 2 {
		t.Errorf("recorded answers %+v, want mismatch 422 ×1 and replay 200 ×2", rows)
	}
}

func TestServer_StatusCodes(t *testing.T) {
	w := newWorld(t)
	changed := pay
	changed.AmountMinor = 1300
	zero := pay
	zero.AmountMinor = 0
	if r := w.call(w.conn, "tok-a", []string{"k-used"}, pay); r.err != nil {
		t.Fatal(r.err)
	}
	cases := []struct {
		name   string
		token  string
		keys   []string
		in     chargeReq
		code   codes.Code
		reason string
	}{
		{"no credential", "", []string{"k-2"}, pay, codes.Unauthenticated, grpcidem.ReasonUnauthenticated},
		{"unknown credential", "tok-x", []string{"k-2"}, pay, codes.Unauthenticated, grpcidem.ReasonUnauthenticated},
		{"missing key", "tok-a", nil, pay, codes.InvalidArgument, grpcidem.ReasonKeyMissing},
		{"empty key", "tok-a", []string{""}, pay, codes.InvalidArgument, grpcidem.ReasonKeyMalformed},
		{"key too long", "tok-a", []string{strings.Repeat("k", 256)}, pay, codes.InvalidArgument, grpcidem.ReasonKeyMalformed},
		{"two keys", "tok-a", []string{"k-2", "k-3"}, pay, codes.InvalidArgument, grpcidem.ReasonKeyMalformed},
		{"invalid field", "tok-a", []string{"k-2"}, zero, codes.InvalidArgument, grpcidem.ReasonInvalidField},
		{"same key, other intent", "tok-a", []string{"k-used"}, changed, codes.FailedPrecondition, grpcidem.ReasonKeyReused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantStatus(t, w.call(w.conn, c.token, c.keys, c.in), c.code, c.reason)
		})
	}
	if n := w.pay.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	// A refused field stored nothing: the corrected request runs under the same key.
	var bad error
	if r := w.call(w.conn, "tok-a", []string{"k-fix"}, zero); status.Code(r.err) == codes.InvalidArgument {
		bad = r.err
	}
	for _, d := range status.Convert(bad).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && br.FieldViolations[0].Field == "amount_minor" {
			bad = nil
		}
	}
	if bad != nil {
		t.Fatalf("refusal without a BadRequest naming amount_minor: %v", bad)
	}
	if r := w.call(w.conn, "tok-a", []string{"k-fix"}, pay); r.err != nil || r.replayed() {
		t.Fatalf("corrected request: %v", r.err)
	}
}

func TestServer_InProgressIsAbortedWithRetryHint(t *testing.T) {
	w := newWorld(t)
	blocking := pay
	blocking.Outcome = "block"
	first := make(chan result, 1)
	go func() { first <- w.call(w.conn, "tok-a", []string{"k-slow"}, blocking) }()
	waitCalls(t, w.pay, 1)
	r := w.call(w.conn, "tok-a", []string{"k-slow"}, blocking)
	wantStatus(t, r, codes.Aborted, grpcidem.ReasonInProgress)
	if grpcidem.RetryDelay(r.err) < time.Second || len(r.trailer.Get(grpcidem.MetadataRetryAfter)) != 1 {
		t.Fatalf("no retry hint: %v %v", r.err, r.trailer)
	}
	close(w.pay.release)
	if f := <-first; f.err != nil {
		t.Fatal(f.err)
	}
	if r := w.call(w.conn, "tok-a", []string{"k-slow"}, blocking); r.err != nil || !r.replayed() {
		t.Fatalf("after completion: %v", r.err)
	}
}

func TestServer_BusinessErrorIsStoredAndReplayed(t *testing.T) {
	w := newWorld(t)
	declined := pay
	declined.Outcome = "decline"
	first := w.call(w.conn, "tok-a", []string{"k-dec"}, declined)
	again := w.call(w.conn, "tok-a", []string{"k-dec"}, declined)
	for _, r := range []result{first, again} {
		if s := status.Convert(r.err); s.Code() != codes.FailedPrecondition || s.Message() != "card declined" {
			t.Fatalf("%v", r.err)
		}
	}
	if first.replayed() || !again.replayed() || w.pay.calls.Load() != 1 {
		t.Fatalf("replayed %v/%v, %d calls", first.replayed(), again.replayed(), w.pay.calls.Load())
	}
}

func TestServer_RetryableErrorReleasesTheKey(t *testing.T) {
	w := newWorld(t)
	flaky := pay
	flaky.Outcome = "flaky"
	if r := w.call(w.conn, "tok-a", []string{"k-flaky"}, flaky); status.Code(r.err) != codes.Unavailable {
		t.Fatalf("first: %v", r.err)
	}
	second := w.call(w.conn, "tok-a", []string{"k-flaky"}, flaky)
	third := w.call(w.conn, "tok-a", []string{"k-flaky"}, flaky)
	if second.err != nil || second.replayed() || third.err != nil || !third.replayed() || third.reply.PaymentID != second.reply.PaymentID {
		t.Fatalf("second %v %v, third %v %v", second.err, second.replayed(), third.err, third.replayed())
	}
	if n := w.pay.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	// A panicking handler releases the key too, and answers Internal.
	boom := pay
	boom.Outcome = "panic"
	wantStatus(t, w.call(w.conn, "tok-a", []string{"k-boom"}, boom), codes.Internal, grpcidem.ReasonInternal)
	var n int64
	w.db.Raw(`SELECT count(*) FROM idempotency_keys WHERE key = 'k-boom'`).Scan(&n)
	if n != 0 {
		t.Fatalf("panicked first attempt left %d keys", n)
	}
}

func TestServer_HandlerCompletesInItsTransaction(t *testing.T) {
	w := newWorld(t)
	in := pay
	in.Outcome = "tx"
	first := w.call(w.conn, "tok-a", []string{"k-tx"}, in)
	again := w.call(w.conn, "tok-a", []string{"k-tx"}, in)
	if first.err != nil || again.err != nil || !again.replayed() || again.reply.PaymentID != first.reply.PaymentID {
		t.Fatalf("%v %v", first.err, again.err)
	}
	var rows []struct {
		State      string
		ResourceID string
	}
	w.db.Raw(`SELECT k.state, k.resource_id FROM idempotency_keys k JOIN grpc_test_payments p ON p.id = k.resource_id WHERE k.key = 'k-tx'`).Scan(&rows)
	if len(rows) != 1 || rows[0].State != "completed" {
		t.Fatalf("key and row not committed together: %+v", rows)
	}
}

func TestServer_ExpiredResultIsNotExecutedAgain(t *testing.T) {
	w := newWorld(t)
	if r := w.call(w.conn, "tok-a", []string{"k-old"}, pay); r.err != nil {
		t.Fatal(r.err)
	}
	pgtest.Exec(t, w.db, `UPDATE idempotency_keys SET response_day = NULL, response_expires_at = now() - interval '1 s'`)
	r := w.call(w.conn, "tok-a", []string{"k-old"}, pay)
	wantStatus(t, r, codes.FailedPrecondition, grpcidem.ReasonResultExpired)
	if !strings.Contains(fmt.Sprint(status.Convert(r.err).Details()), "pay_1") || w.pay.calls.Load() != 1 {
		t.Fatalf("%v, %d calls", status.Convert(r.err).Details(), w.pay.calls.Load())
	}
}

// The client interceptor sets one key per logical call; gRPC's own retries (service config) and
// the interceptor's retries both resend it.
func TestClient_OneKeyAcrossGRPCAndOwnRetries(t *testing.T) {
	w := newWorld(t)
	var invokes atomic.Int64
	counter := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		invokes.Add(1)
		return inv(ctx, method, req, reply, cc, opts...)
	}
	client := grpcidem.NewClientInterceptor(grpcidem.ClientConfig{Backoff: 5 * time.Millisecond})
	auth := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-a")
	}
	const retryPolicy = `{"methodConfig":[{"name":[{"service":"grpcidem.test.Payments"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	for _, c := range []struct {
		name        string
		opts        []grpc.DialOption
		wantInvokes int64
	}{
		{"grpc retries", []grpc.DialOption{grpc.WithDefaultServiceConfig(retryPolicy)}, 1},
		{"own retries", []grpc.DialOption{grpc.WithDisableRetry()}, 3},
	} {
		invokes.Store(0)
		w.fails.Store(2)
		cc := w.dial(append(c.opts, grpc.WithChainUnaryInterceptor(client, counter))...)
		reply := new(chargeReply)
		var trailer metadata.MD
		err := cc.Invoke(auth(context.Background()), chargeMethod, &pay, reply, grpc.Trailer(&trailer))
		if err != nil || reply.PaymentID == "" || grpcidem.Replayed(trailer) {
			t.Fatalf("%s: %v", c.name, err)
		}
		keys := drain(w.keys)
		if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] || strings.Contains(keys[0], ",") {
			t.Fatalf("%s: keys seen %q", c.name, keys)
		}
		if invokes.Load() != c.wantInvokes {
			t.Fatalf("%s: %d invokes by the interceptor, want %d", c.name, invokes.Load(), c.wantInvokes)
		}
	}
	// A caller's key is used as is, and the interceptor waits out "in progress" with it.
	w.fails.Store(0)
	blocking := pay
	blocking.Outcome = "block"
	first := make(chan result, 1)
	go func() { first <- w.call(w.conn, "tok-a", []string{"caller-key"}, blocking) }()
	waitCalls(t, w.pay, 3)
	time.AfterFunc(300*time.Millisecond, func() { close(w.pay.release) })
	// MaxHint shortens the server's hint (≤ 5 s while a holder is live) to keep the test short.
	patient := grpcidem.NewClientInterceptor(grpcidem.ClientConfig{MaxHint: 200 * time.Millisecond, MaxAttempts: 20})
	cc := w.dial(grpc.WithChainUnaryInterceptor(patient))
	reply := new(chargeReply)
	var trailer metadata.MD
	err := cc.Invoke(grpcidem.WithKey(auth(context.Background()), "caller-key"), chargeMethod, &blocking, reply, grpc.Trailer(&trailer))
	if f := <-first; err != nil || f.err != nil || reply.PaymentID != f.reply.PaymentID || !grpcidem.Replayed(trailer) {
		t.Fatalf("waiting client: %v %+v, first %v %+v", err, reply, f.err, f.reply)
	}
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case k := <-ch:
			out = append(out, k)
		default:
			return out
		}
	}
}

// waitCalls waits until the handler has been reached want times, on its per-call signal.
func waitCalls(t *testing.T, p *payments, want int64) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for p.calls.Load() < want {
		select {
		case <-p.called:
		case <-timeout:
			t.Fatalf("handler reached %d times, want %d", p.calls.Load(), want)
		}
	}
}

func TestServer_KeyOptionalMethodRunsWithoutKey(t *testing.T) {
	w := newWorld(t, func(_ *claim.Config, m *grpcidem.Method) { m.KeyOptional = true })
	for i := 1; i <= 2; i++ {
		r := w.call(w.conn, "tok-a", nil, pay)
		if r.err != nil || r.reply.PaymentID != fmt.Sprintf("pay_%d", i) || r.replayed() {
			t.Fatalf("call %d without a key: %+v %v", i, r.reply, r.err)
		}
	}
	var n int
	w.db.Raw(`SELECT count(*) FROM idempotency_keys`).Scan(&n)
	if n != 0 {
		t.Fatalf("calls without a key stored %d keys", n)
	}
	// A key still makes the call idempotent.
	if r := w.call(w.conn, "tok-a", []string{"k-opt"}, pay); r.err != nil || r.reply.PaymentID != "pay_3" {
		t.Fatalf("with a key: %+v %v", r.reply, r.err)
	}
	if r := w.call(w.conn, "tok-a", []string{"k-opt"}, pay); r.err != nil || r.reply.PaymentID != "pay_3" || !r.replayed() {
		t.Fatalf("retry with the key: %+v %v", r.reply, r.err)
	}
}

func TestServer_UnstorableAnswerLeavesKeyRetryable(t *testing.T) {
	w := newWorld(t, func(c *claim.Config, _ *grpcidem.Method) { c.MaxSnapshotBytes = 8 })
	if r := w.call(w.conn, "tok-a", []string{"k-big"}, pay); r.err != nil || r.reply.PaymentID != "pay_1" {
		t.Fatalf("first: %+v %v", r.reply, r.err)
	}
	var row struct{ State, ErrorCode string }
	w.db.Raw(`SELECT state, error_code FROM idempotency_keys WHERE key = 'k-big'`).Scan(&row)
	if row.State != "failed_retryable" || row.ErrorCode != "snapshot_too_large" {
		t.Fatalf("key after an answer over the snapshot limit: %+v", row)
	}
}
