package grpcidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// MetadataKey is the request metadata carrying the idempotency key.
const MetadataKey = "idempotency-key"

// MetadataReplayed is the trailer marking an answer replayed from a stored snapshot ("true").
const MetadataReplayed = "idempotent-replayed"

// MetadataRetryAfter is the trailer telling a caller of a key in progress when to come back, in
// whole seconds.
const MetadataRetryAfter = "retry-after"

// TenantFunc returns the authenticated caller of the call, from the service's own authentication
// of the peer (a bearer token in metadata, an mTLS identity). An error answers Unauthenticated.
type TenantFunc func(ctx context.Context) (string, error)

// Validator checks a request message (as its JSON intent) before anything is claimed: a
// *Refusal answers InvalidArgument naming the field and stores nothing under the key; other errors
// answer InvalidArgument INVALID_REQUEST.
type Validator func(intent []byte) error

// Method declares the contract of one unary method.
type Method struct {
	// Operation names the business action (the key's scope); taken from Run when that is set.
	Operation string
	// Intent says which request fields carry intent; taken from Run when that is set.
	Intent claim.IntentSpec
	// KeyOptional lets calls without a key through without idempotency (default: required).
	KeyOptional bool
	// Run, when set, is the method: the interceptor runs it through the claim logic (claim,
	// downstream lookup first on a retry or takeover, execute, apply + complete) and the
	// registered handler is not called.
	Run claim.Operation
	// Transactional declares that the handler commits its effects only in the transaction that
	// completes the key (Complete), so a key left unfinished proves nothing of it committed: a
	// retry or takeover then runs the handler again, and an error releases the key. Without it
	// (and without Run) the handler may act outside: an error that is not a stored business
	// outcome, a panic or a crash holds the key, and every retry answers NEEDS_RECOVERY (the
	// handler cannot check downstream) until an operator decides.
	Transactional bool
	// Response returns a new, empty response message, into which stored answers are decoded.
	Response func() any
	// ResourceID, when set, names the created resource of a response (stored with the key).
	ResourceID func(resp any) string
	// Validate runs on the request before the claim.
	Validate []Validator
}

// Config is shared by every method of a service.
type Config struct {
	// Store is the claim store every call uses, unless Stores is set.
	Store  *claim.Store
	Tenant TenantFunc
	// Stores, when set, picks the store by the authenticated tenant (a deployment of several
	// cells, package cells): a call is claimed in its tenant's cell only. A tenant it finds no
	// store for is refused — Unavailable, reason TENANT_UNAVAILABLE, a log line, Unrouted
	// counted — and never sent to Store.
	Stores func(tenant string) (*claim.Store, error)
	// AnswersOf, with Stores, is the answer recorder of a tenant's store; nil records none.
	// Answers is not used with Stores.
	AnswersOf func(*claim.Store) *claim.AnswerRecorder
	// Unrouted counts the calls refused because Stores found no store for their tenant.
	Unrouted claim.Counter
	// Methods maps full method names ("/pkg.Service/Method") to their contract; calls of other
	// methods pass through untouched.
	Methods map[string]Method
	// Service names the caller in key events (actor service:NAME; default "grpc").
	Service string
	// Answers, when set, records the replays, in-progress and reused-key answers each key's
	// client gets (by the HTTP status of the same answer), off the answering path.
	Answers *claim.AnswerRecorder
	Logger  *slog.Logger
}

type server struct {
	cfg     Config
	methods map[string]*Method
	actor   string // "service:NAME", the actor of every key event
}

// NewServerInterceptor validates cfg and returns the unary server interceptor.
func NewServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	if (cfg.Store == nil && cfg.Stores == nil) || cfg.Tenant == nil {
		return nil, errors.New("grpcidem: Config.Store (or Stores) and Config.Tenant are required")
	}
	if cfg.Service == "" {
		cfg.Service = "grpc"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &server{cfg: cfg, methods: map[string]*Method{}, actor: "service:" + cfg.Service}
	for name, m := range cfg.Methods {
		if m.Run != nil {
			m.Operation, m.Intent = m.Run.Name(), m.Run.Intent()
		}
		switch {
		case !strings.HasPrefix(name, "/") || strings.Count(name, "/") != 2:
			return nil, fmt.Errorf("grpcidem: method %q: want a full method name /pkg.Service/Method", name)
		case m.Operation == "":
			return nil, fmt.Errorf("grpcidem: method %s: Operation is required", name)
		case m.Response == nil:
			return nil, fmt.Errorf("grpcidem: method %s: Response is required to replay answers", name)
		}
		if err := m.Intent.Check(); err != nil {
			return nil, fmt.Errorf("grpcidem: method %s: Intent.%w", name, err)
		}
		s.methods[name] = &m
	}
	return s.intercept, nil
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := s.methods[info.FullMethod]
	if !ok {
		return handler(ctx, req)
	}
	// Claiming (and answering by the key) runs in its own frame, popped before the handler and
	// the completion run. A unary call gets a fresh goroutine whose stack starts small; the
	// completion's statement is the deepest point of the call (gRPC, this interceptor, the claim
	// logic, database/sql, pgx), and when that point overflows the stack every frame below it is
	// copied to a bigger one — with the claim's frames still held, it did so on every call.
	switch out, store, resp, err := s.begin(ctx, m, req, info.FullMethod); out {
	case nil:
		return resp, err
	case unkeyed:
		return handler(ctx, req)
	default:
		return s.runHandler(ctx, m, store, out, req, handler)
	}
}

// unkeyed is begin's answer for a KeyOptional method called without a key: the handler runs
// without idempotency.
var unkeyed = new(claim.Outcome)

// begin authenticates, picks the tenant's store, validates and claims the call's key. It returns
// the outcome and the store when a generic handler is to run under the acquired lease (unkeyed:
// without one), else (nil, the call's answer).
//
//go:noinline
func (s *server) begin(ctx context.Context, m *Method, req any, fullMethod string) (*claim.Outcome, *claim.Store, any, error) {
	tenant, err := s.cfg.Tenant(ctx)
	if err != nil || tenant == "" {
		return nil, nil, nil, statusError(codes.Unauthenticated, ReasonUnauthenticated, "a valid credential is required", nil)
	}
	store, answers, err := s.storeFor(tenant, fullMethod)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := keyFromMetadata(ctx)
	if err != nil {
		return nil, nil, nil, statusError(codes.InvalidArgument, ReasonKeyMalformed, err.Error(), nil)
	}
	if key == "" {
		if m.KeyOptional {
			return unkeyed, nil, nil, nil
		}
		return nil, nil, nil, statusError(codes.InvalidArgument, ReasonKeyMissing,
			"this method requires idempotency-key metadata: 1-255 printable ASCII characters, generated before the first attempt and reused on every retry", nil)
	}
	if h, ok := req.(DecodeErrorHolder); ok && h.DecodeError() != nil {
		return nil, nil, nil, statusError(codes.InvalidArgument, ReasonInvalidRequest, "malformed request message: "+h.DecodeError().Error(), nil)
	}
	intent, err := marshalMessage(req)
	if err != nil {
		return nil, nil, nil, statusError(codes.InvalidArgument, ReasonInvalidRequest, "the request message cannot be read as JSON", nil)
	}
	if hasNUL(intent) { // PostgreSQL's jsonb cannot hold U+0000: refuse it here, not as Internal later
		return nil, nil, nil, statusError(codes.InvalidArgument, ReasonInvalidRequest, "the request holds a NUL character", nil)
	}
	if err := validate(intent, m.Validate); err != nil {
		return nil, nil, nil, err
	}
	creq := claim.Request{Tenant: tenant, Operation: m.Operation, Key: key, Intent: intent, Spec: m.Intent,
		Actor: s.actor}
	out, err := store.Claim(ctx, creq)
	if err != nil {
		return nil, nil, nil, s.errorStatus(fullMethod, err)
	}
	if out.Kind != claim.Acquired {
		resp, err := s.answer(ctx, m, out, answers)
		return nil, nil, resp, err
	}
	if m.Run != nil {
		out, err = store.Drive(ctx, m.Run, out.Lease, claim.DriveOptions{Execute: true})
		if err != nil {
			return nil, nil, nil, s.errorStatus(fullMethod, err)
		}
		resp, err := s.answer(ctx, m, out, answers)
		return nil, nil, resp, err
	}
	if out.Lease.MustCheckDownstream() && !m.Transactional {
		// A plain handler has no downstream lookup: an earlier attempt may have acted, so the key
		// is held for an operator (release for retry, or mark final) and never run blind.
		s.hold(context.WithoutCancel(ctx), store, out.Lease, "outcome_unknown", "an earlier attempt did not finish")
		return nil, nil, nil, needsRecovery()
	}
	return out, store, nil, nil
}

// needsRecovery is the answer to a call whose key is held: an earlier attempt's outcome outside
// is unknown, and only an operator may let the handler run again.
func needsRecovery() error {
	return statusError(codes.FailedPrecondition, ReasonNeedsRecovery,
		"the outcome of an earlier attempt with this key is unknown (it did not finish and may have taken effect); it is not run again unless an operator releases it", nil)
}

// hold records that the outcome of a plain handler's attempt is unknown: the key is held
// (failed retryable, needs attention) and every retry answers NEEDS_RECOVERY without running the
// handler, until an operator releases it for retry or marks it final (console or CLI, audited).
// The stored answer is a 500 for an HTTP reader of the same key, as httpidem's External routes
// store; once an operator marks the key final it is every retry's answer (FailedPrecondition,
// without the NEEDS_RECOVERY reason: nothing is left to recover).
func (s *server) hold(ctx context.Context, store *claim.Store, l *claim.Lease, code, detail string) {
	body, _ := json.Marshal(storedError{GRPCCode: ptr(int(codes.FailedPrecondition)), Message: status.Convert(needsRecovery()).Message()})
	snap := &claim.Snapshot{Status: http.StatusInternalServerError, Headers: jsonHeaders, Body: body}
	if err := store.Fail(ctx, nil, l, claim.HeldFailure(code, detail, snap)); err != nil {
		s.cfg.Logger.Error("holding a key whose outcome is unknown failed", "digest", l.Digest, "err", err)
		return
	}
	s.cfg.Logger.Warn("key held: a plain handler's outcome is unknown", "digest", l.Digest, "code", code)
}

func ptr[T any](v T) *T { return &v }

// runHandler calls a generic handler holding the lease and records what it answered, unless the
// handler completed or released the key itself. Its frame, and record's, are small: they sit
// under the completion's statement (see intercept).
func (s *server) runHandler(ctx context.Context, m *Method, store *claim.Store, out *claim.Outcome, req any, handler grpc.UnaryHandler) (any, error) {
	st := &callState{lease: out.Lease, store: store, method: m, logger: s.cfg.Logger}
	resp, herr := s.callHandler(context.WithValue(ctx, stateKey{}, st), st, req, handler)
	switch {
	case st.done:
		return resp, herr
	case herr != nil:
		s.recordError(context.WithoutCancel(ctx), st, herr)
		return nil, herr
	}
	s.record(context.WithoutCancel(ctx), st, resp) // the key's record must outlive a cancelled call
	return resp, nil
}

// callHandler runs the handler, turning a panic into Internal (the key is then held, or released
// for a Transactional method).
//
//go:noinline
func (s *server) callHandler(ctx context.Context, st *callState, req any, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The panic value may hold request data: logs carry its type only.
			s.cfg.Logger.Error("idempotent handler panicked", "digest", st.lease.Digest, "panic_type", fmt.Sprintf("%T", r))
			st.panicType = fmt.Sprintf("%T", r)
			resp, err = nil, statusError(codes.Internal, ReasonInternal, "internal error; retry with the same key", nil)
		}
	}()
	return handler(ctx, req)
}

// record completes the key with the handler's answer.
func (s *server) record(ctx context.Context, st *callState, resp any) {
	snap, err := st.snapshot(resp)
	if err != nil {
		s.unstorable(ctx, st, "snapshot_unencodable", "the response could not be stored", "response cannot be stored as JSON; key failed retryable")
		return
	}
	if err := st.store.Complete(ctx, nil, st.lease, snap); err != nil {
		s.completeFailed(ctx, st, err)
	}
}

//go:noinline
func (s *server) completeFailed(ctx context.Context, st *callState, err error) {
	if errors.Is(err, claim.ErrSnapshotTooLarge) {
		s.unstorable(ctx, st, "snapshot_too_large", "response exceeded the snapshot limit", "response too large to snapshot; key failed retryable")
		return
	}
	s.cfg.Logger.Error("recording the response failed", "digest", st.lease.Digest, "err", err)
}

// unstorable fails the key retryably when the handler's answer cannot be stored; a plain
// handler acted outside, so its key is held instead.
//
//go:noinline
func (s *server) unstorable(ctx context.Context, st *callState, code, detail, logMsg string) {
	s.cfg.Logger.Warn(logMsg, "digest", st.lease.Digest)
	if !st.method.Transactional {
		s.hold(ctx, st.store, st.lease, code, detail)
		return
	}
	if err := st.store.Fail(ctx, nil, st.lease, claim.RetryableFailure(code, detail)); err != nil {
		s.cfg.Logger.Error("recording the response failed", "digest", st.lease.Digest, "err", err)
	}
}

// recordError stores a business outcome (failed final, replayed); any other error leaves the
// outcome unknown: a Transactional method's effects rolled back with its transaction, so its key
// is released and the same key runs again; a plain handler may have acted outside (a channel
// that timed out may have charged), so its key is held.
//
//go:noinline
func (s *server) recordError(ctx context.Context, st *callState, herr error) {
	sts := status.Convert(herr)
	var err error
	switch {
	case storedCode(sts.Code()):
		err = st.store.Fail(ctx, nil, st.lease, claim.FinalFailure("grpc_"+codeName(sts.Code()), sts.Message(), errorSnapshot(sts)))
	case st.method.Transactional:
		err = st.store.Release(ctx, st.lease, "handler answered "+sts.Code().String())
	case st.panicType != "":
		s.hold(ctx, st.store, st.lease, "panic", "the handler panicked ("+st.panicType+")")
	default:
		s.hold(ctx, st.store, st.lease, "grpc_"+codeName(sts.Code()), sts.Message())
	}
	if err != nil {
		s.cfg.Logger.Error("recording the handler's error failed", "digest", st.lease.Digest, "err", err)
	}
}

// storedCode says which handler codes are business outcomes, failed finally and replayed (a
// declined charge, a missing account); every other code leaves the outcome unknown (recordError).
func storedCode(c codes.Code) bool {
	switch c {
	case codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists, codes.OutOfRange:
		return true
	}
	return false
}

type stateKey struct{}

type callState struct {
	lease  *claim.Lease
	store  *claim.Store
	method *Method
	logger *slog.Logger
	done   bool
	// panicType is the type of the value the handler panicked with ("" when it did not).
	panicType string
}

func (st *callState) snapshot(resp any) (*claim.Snapshot, error) {
	body, err := marshalMessage(resp)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", st.lease.Digest, err)
	}
	snap := &claim.Snapshot{Status: http.StatusOK, Headers: jsonHeaders, Body: body}
	if st.method.ResourceID != nil {
		snap.ResourceID = st.method.ResourceID(resp)
	}
	return snap, nil
}

// Lease returns the lease a wrapped handler holds (nil outside one).
func Lease(ctx context.Context) *claim.Lease {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		return st.lease
	}
	return nil
}

// Complete completes the key inside tx, the handler's own transaction, with resp as the stored
// answer, so the business rows and the key commit together; the handler then returns resp.
func Complete(ctx context.Context, tx *gorm.DB, resp any) error {
	st, ok := ctx.Value(stateKey{}).(*callState)
	if !ok {
		return errors.New("grpcidem.Complete outside an idempotent method")
	}
	snap, err := st.snapshot(resp)
	if err != nil {
		return err
	}
	if err := st.store.Complete(ctx, tx, st.lease, snap); err != nil {
		return err
	}
	st.done = true
	return nil
}

// Refuse is for a wrapped handler that finds the request invalid after the claim: it releases the
// claim (a first attempt leaves no record, so the same key with a corrected request executes) and
// returns the InvalidArgument error naming the field, for the handler to return.
func Refuse(ctx context.Context, r *Refusal) error {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		st.done = true
		if err := st.store.Release(context.WithoutCancel(ctx), st.lease, "refused: "+r.Error()); err != nil {
			st.logger.Error("releasing a refused request failed", "digest", st.lease.Digest, "err", err)
		}
	}
	return r.status()
}

// keyFromMetadata reads the one idempotency-key value ("" when none was sent).
func keyFromMetadata(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, MetadataKey) // the one key, not a copy of all metadata
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errors.New("send exactly one idempotency-key")
	}
	if err := claim.ValidateKey(vals[0]); err != nil {
		return "", fmt.Errorf("idempotency-key %w", err)
	}
	return vals[0], nil
}

// jsonNames makes protojson use the proto field names, so the fingerprint and stored answers of a
// protobuf message read like its JSON twin over HTTP.
var jsonNames = protojson.MarshalOptions{UseProtoNames: true}

// marshalMessage is the JSON form of a message: the request's intent, or a stored answer.
func marshalMessage(v any) ([]byte, error) {
	if pm, ok := v.(proto.Message); ok {
		return jsonNames.Marshal(pm)
	}
	return json.Marshal(v)
}

// hasNUL reports whether a JSON document holds U+0000 (escaped as \u0000 inside a string).
func hasNUL(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case 0:
			return true
		case '\\':
			if i+5 < len(doc) && doc[i+1] == 'u' && string(doc[i+2:i+6]) == "0000" {
				return true
			}
			i++ // skip the escaped character, so \\u0000 (a backslash, then text) is not read as NUL
		}
	}
	return false
}

func unmarshalMessage(b []byte, v any) error {
	if pm, ok := v.(proto.Message); ok {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, pm)
	}
	return json.Unmarshal(b, v)
}

// jsonHeaders are the headers of every stored answer: read only, shared by all snapshots.
var jsonHeaders = map[string]string{"Content-Type": "application/json"}
