package grpcidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemops/idemops/claim"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every error this package answers.
const ErrorDomain = "idemops"

// Reasons in ErrorInfo, one per case (the gRPC twins of httpidem's problem types).
const (
	ReasonUnauthenticated       = "UNAUTHENTICATED"
	ReasonKeyMissing            = "KEY_MISSING"
	ReasonKeyMalformed          = "KEY_MALFORMED"
	ReasonInvalidRequest        = "INVALID_REQUEST"
	ReasonInvalidField          = "INVALID_FIELD"
	ReasonInProgress            = "REQUEST_IN_PROGRESS"
	ReasonKeyReused             = "KEY_REUSED"
	ReasonResultExpired         = "RESULT_EXPIRED"
	ReasonNeedsRecovery         = "NEEDS_RECOVERY"
	ReasonRequestFailed         = "REQUEST_FAILED"
	ReasonDownstreamUnavailable = "DOWNSTREAM_UNAVAILABLE"
	ReasonStoreUnavailable      = "STORE_UNAVAILABLE"
	ReasonLeaseLost             = "LEASE_LOST"
	ReasonTenantMoving          = "TENANT_MOVING"
	ReasonInternal              = "INTERNAL"
	ReasonTenantUnavailable     = "TENANT_UNAVAILABLE"
)

// Reason returns the ErrorInfo reason of an error this package answered ("" for others).
func Reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

// RetryDelay returns the RetryInfo delay of an error (0 when it carries none).
func RetryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// Replayed reports whether trailing metadata marks the answer as replayed.
func Replayed(trailer metadata.MD) bool {
	v := trailer.Get(MetadataReplayed)
	return len(v) == 1 && v[0] == "true"
}

func statusError(c codes.Code, reason, msg string, meta map[string]string, extra ...protoadapt.MessageV1) error {
	st := status.New(c, msg)
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}}, extra...)
	if ds, err := st.WithDetails(details...); err == nil {
		st = ds
	}
	return st.Err()
}

// Refusal is a refusal before execution (a parameter is invalid): nothing is stored under the
// key, so the same key with a corrected request executes. A refusal that is the business outcome
// (a declined card) is not a Refusal: return FailedPrecondition from the handler.
type Refusal struct {
	// Field names the offending request field ("amount_minor"); empty when none applies.
	Field  string
	Reason string
}

// NewRefusal builds a Refusal naming field (for a Validator to return).
func NewRefusal(field, reason string) *Refusal { return &Refusal{Field: field, Reason: reason} }

func (r *Refusal) Error() string {
	if r.Field == "" {
		return r.Reason
	}
	return r.Field + ": " + r.Reason
}

func (r *Refusal) status() error {
	var extra []protoadapt.MessageV1
	meta := map[string]string{}
	if r.Field != "" {
		meta["field"] = r.Field
		extra = append(extra, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: r.Field, Description: r.Reason}}})
	}
	return statusError(codes.InvalidArgument, ReasonInvalidField, r.Error(), meta, extra...)
}

// validate runs the validators before the claim.
func validate(intent []byte, vs []Validator) error {
	for _, v := range vs {
		err := v(intent)
		if err == nil {
			continue
		}
		var r *Refusal
		if errors.As(err, &r) {
			return r.status()
		}
		return statusError(codes.InvalidArgument, ReasonInvalidRequest, err.Error(), nil)
	}
	return nil
}

// answer turns a claim or run outcome into the call's answer: the one place where outcomes
// become gRPC.
func (s *server) answer(ctx context.Context, m *Method, out *claim.Outcome, answers *claim.AnswerRecorder) (any, error) {
	switch out.Kind {
	case claim.Completed, claim.Recovered:
		return fromSnapshot(m, out.Snapshot)
	case claim.Replay:
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataReplayed, "true"))
		if out.Failure != nil && out.Failure.Hold { // held: outcome unknown until an operator decides
			answers.Record(out.KeyID, claim.AnswerReplay, http.StatusInternalServerError)
			return nil, needsRecovery()
		}
		if out.Snapshot == nil { // failed_final without a stored answer
			answers.Record(out.KeyID, claim.AnswerReplay, http.StatusUnprocessableEntity)
			return nil, statusError(codes.FailedPrecondition, ReasonRequestFailed, out.Failure.Detail, nil)
		}
		answers.Record(out.KeyID, claim.AnswerReplay, out.Snapshot.Status)
		return fromSnapshot(m, out.Snapshot)
	case claim.InProgress:
		answers.Record(out.KeyID, claim.AnswerInProgress, http.StatusConflict)
		secs := int(math.Ceil(out.RetryAfter.Seconds()))
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataRetryAfter, strconv.Itoa(secs),
			"grpc-retry-pushback-ms", strconv.FormatInt(out.RetryAfter.Milliseconds(), 10)))
		return nil, statusError(codes.Aborted, ReasonInProgress,
			"a request with this idempotency-key is being processed; retry later with the same key", nil,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)})
	case claim.Mismatch:
		answers.Record(out.KeyID, claim.AnswerMismatch, http.StatusUnprocessableEntity)
		return nil, statusError(codes.FailedPrecondition, ReasonKeyReused,
			"this idempotency-key was used with a different request", nil)
	case claim.Expired:
		return nil, statusError(codes.FailedPrecondition, ReasonResultExpired,
			"the result of this idempotency-key has expired; it will not be executed again",
			map[string]string{"resource_id": out.ResourceID})
	case claim.Failed:
		if out.Failure != nil && out.Failure.Snapshot != nil {
			return fromSnapshot(m, out.Failure.Snapshot)
		}
		if out.Failure != nil && !out.Failure.Retryable {
			return nil, statusError(codes.FailedPrecondition, ReasonRequestFailed, out.Failure.Detail, nil)
		}
		return nil, statusError(codes.Unavailable, ReasonDownstreamUnavailable,
			"the operation did not complete; retry with the same idempotency-key", nil,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	}
	return nil, statusError(codes.Internal, ReasonInternal, "internal error", nil)
}

// errorStatus maps the claim package's errors.
func (s *server) errorStatus(method string, err error) error {
	switch {
	case errors.Is(err, claim.ErrInvalidKey):
		return statusError(codes.InvalidArgument, ReasonKeyMalformed, err.Error(), nil)
	case errors.Is(err, claim.ErrInvalidIntent):
		return statusError(codes.InvalidArgument, ReasonInvalidRequest, err.Error(), nil)
	case errors.Is(err, claim.ErrLeaseLost):
		return statusError(codes.Aborted, ReasonLeaseLost, "another worker took this request over; retry with the same key", nil)
	case errors.Is(err, claim.ErrTenantMoving):
		// Fenced for a move between cells (migration 00135): nothing was written.
		return statusError(codes.Unavailable, ReasonTenantMoving,
			"the account is being moved to another cell; nothing was executed or stored; retry with the same key", nil,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	case claim.Unreachable(err):
		// The store could not be reached (a failover in progress): the key settles whatever the
		// claim did, so the same key may come back.
		s.cfg.Logger.Warn("idempotency store unreachable", "method", method, "err", err)
		return statusError(codes.Unavailable, ReasonStoreUnavailable, "the idempotency store cannot be reached; retry with the same key", nil,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	}
	s.cfg.Logger.Error("idempotent call failed", "method", method, "err", err)
	return statusError(codes.Internal, ReasonInternal, "internal error; retry with the same key", nil)
}

// storedError is how a handler's business error is stored: its code and message (details are
// not kept), so a replay answers the same status.
type storedError struct {
	GRPCCode *int   `json:"grpc_code"`
	Message  string `json:"message"`
}

func errorSnapshot(st *status.Status) *claim.Snapshot {
	c := int(st.Code())
	body, _ := json.Marshal(storedError{GRPCCode: &c, Message: st.Message()})
	return &claim.Snapshot{Status: httpStatus(st.Code()), Headers: jsonHeaders, Body: body}
}

// fromSnapshot answers a stored snapshot: below 400 the response message decoded from its body;
// otherwise an error — the stored gRPC status, or, for a snapshot written for HTTP (an
// Operation's declined charge), the code that HTTP status maps to.
func fromSnapshot(m *Method, snap *claim.Snapshot) (any, error) {
	if snap.Status >= 400 {
		var se storedError
		if json.Unmarshal(snap.Body, &se) == nil && se.GRPCCode != nil {
			return nil, status.Error(codes.Code(*se.GRPCCode), se.Message)
		}
		meta := map[string]string{"http_status": strconv.Itoa(snap.Status)}
		if snap.ResourceID != "" {
			meta["resource_id"] = snap.ResourceID
		}
		msg := fmt.Sprintf("%d %s", snap.Status, http.StatusText(snap.Status))
		if b := strings.TrimSpace(string(snap.Body)); b != "" && len(b) <= 1024 {
			msg += ": " + b
		}
		return nil, statusError(grpcCode(snap.Status), ReasonRequestFailed, msg, meta)
	}
	resp := m.Response()
	if len(snap.Body) > 0 {
		if err := unmarshalMessage(snap.Body, resp); err != nil {
			return nil, statusError(codes.Internal, ReasonInternal, "the stored answer does not fit the response message", nil)
		}
	}
	return resp, nil
}

// grpcCode maps the HTTP status of a stored snapshot to a gRPC code.
func grpcCode(s int) codes.Code {
	switch s {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	}
	if s >= 500 {
		return codes.Unavailable
	}
	return codes.FailedPrecondition // 402 declined, 409, 422 …
}

// httpStatus is the HTTP status stored with a gRPC business error (for the console and for an
// HTTP replay of the same key).
func httpStatus(c codes.Code) int {
	switch c {
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists:
		return http.StatusConflict
	}
	return http.StatusUnprocessableEntity // FailedPrecondition, OutOfRange
}

func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
