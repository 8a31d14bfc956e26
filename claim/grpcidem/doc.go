// Package grpcidem puts the idempotency-key contract on unary gRPC methods, on top of the claim
// package, with the same semantics as httpidem: the key comes from the request metadata, the
// tenant from the service's own authentication of the peer (Config.Tenant — never a field of the
// request), the fingerprint from the request message, and every decision from claim.Store.
//
// # Server
//
// NewServerInterceptor returns a grpc.UnaryServerInterceptor for the methods listed in
// Config.Methods (others pass through). A method either names a claim.Operation (Method.Run: the
// interceptor runs it through Store.Claim and Store.Drive, downstream lookup first on retries, as
// httpidem.Handler does) or wraps the registered handler (as httpidem.Middleware does): OK
// completes the key with the response as its snapshot; a business outcome (FailedPrecondition,
// NotFound, AlreadyExists, OutOfRange) fails it finally and is replayed. Any other code, and a
// panic, leaves the outcome unknown. A Transactional method commits its effects only with the key
// (Complete inside its own transaction), so its claim is released and the same key runs again. A
// plain method (neither Run nor Transactional) may have acted outside — a channel call that timed
// out may have charged — and has no downstream lookup, so its key is held (failed retryable,
// needs attention, as httpidem's External routes): every retry answers NEEDS_RECOVERY without
// running the handler, until an operator releases the key for retry or marks it final (console
// or CLI, audited). A handler that refuses its input after the claim calls Refuse, which releases.
//
// Status codes (every error carries a google.rpc.ErrorInfo with domain "idemops" and one of the
// Reason constants):
//
//	no valid credential                     Unauthenticated      UNAUTHENTICATED
//	idempotency-key missing                 InvalidArgument      KEY_MISSING
//	key empty, > 255 chars, not printable
//	  ASCII, or sent more than once         InvalidArgument      KEY_MALFORMED
//	message malformed, holds a NUL, or
//	  lacks a declared intent field         InvalidArgument      INVALID_REQUEST
//	a validator refused a field             InvalidArgument      INVALID_FIELD (+ BadRequest)
//	same key still in progress              Aborted              REQUEST_IN_PROGRESS (+ RetryInfo,
//	                                                             trailers retry-after (s) and
//	                                                             grpc-retry-pushback-ms)
//	same key, another intent                FailedPrecondition   KEY_REUSED
//	stored result expired (tombstone)       FailedPrecondition   RESULT_EXPIRED (+ resource_id)
//	a plain handler's earlier attempt
//	  ended unknown (any other code, a
//	  panic, a crash): the key is held      FailedPrecondition   NEEDS_RECOVERY
//	final failure without a stored answer   FailedPrecondition   REQUEST_FAILED
//	an Operation's stored 4xx answer        402/409/422 → FailedPrecondition, 400 → InvalidArgument,
//	  (a declined charge)                   404 → NotFound       REQUEST_FAILED
//	a handler's stored business error       its own code and message (details are not stored)
//	downstream failed retryably             Unavailable          DOWNSTREAM_UNAVAILABLE (+ RetryInfo)
//	the idempotency store cannot be
//	  reached (a failover in progress)      Unavailable          STORE_UNAVAILABLE (+ RetryInfo)
//	lease taken over by another worker      Aborted              LEASE_LOST
//	the tenant is being moved between cells Unavailable          TENANT_MOVING (+ RetryInfo)
//	completed / finally failed              the stored answer, with trailer idempotent-replayed: true
//
// An expired result answers FailedPrecondition, not NotFound: the key still exists as a
// tombstone and will never execute again; NotFound would read as "no such payment, create it".
//
// # Client
//
// NewClientInterceptor attaches one key per logical call — the caller's (WithKey) or one
// generated once — to the outgoing metadata before the first attempt, so gRPC's own retries
// (a service-config retryPolicy) resend it verbatim, and the interceptor's own retries (on
// Unavailable and Aborted, capped exponential backoff with jitter, honouring the server's
// RetryInfo or retry-after) reuse it too.
//
// # Messages
//
// The fingerprint is taken over the request message as JSON: protojson with proto field names for
// protobuf messages, encoding/json otherwise. Stored answers are JSON too and are decoded into
// Method.Response on replay. JSONCodec lets a service without protoc carry plain Go structs.
package grpcidem
