package demo

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/claim/httpidem"
)

// The payments service over gRPC has no .proto: its one method carries the same JSON as
// POST /v1/payments, with the "json" codec (application/grpc+json), so the intent fields, the
// fingerprint and the stored answer are the HTTP route's — a key used over one transport replays
// over the other.
func init() { encoding.RegisterCodec(grpcidem.JSONCodec{}) }

// GRPCChargeMethod is the full name of the payment call over gRPC.
const GRPCChargeMethod = "/idemops.demo.v1.Payments/Charge"

// ChargeRequest is the gRPC request: the fields of the POST /v1/payments body.
type ChargeRequest struct {
	AmountMinor     int64  `json:"amount_minor,omitempty"`
	Currency        string `json:"currency,omitempty"`
	MerchantOrderNo string `json:"merchant_order_no,omitempty"`
	Payee           string `json:"payee,omitempty"`
	Description     string `json:"description,omitempty"`
	ClientTS        string `json:"client_ts,omitempty"`

	decodeErr error
}

// SetDecodeError and DecodeError let a malformed message reach the interceptor, which answers
// InvalidArgument (gRPC itself would answer Internal).
func (r *ChargeRequest) SetDecodeError(err error) { r.decodeErr = err }

// DecodeError is the message's decode failure, if any.
func (r *ChargeRequest) DecodeError() error { return r.decodeErr }

// ChargeReply is the gRPC answer: the stored snapshot of the charge.
type ChargeReply struct {
	PaymentID       string `json:"payment_id"`
	Status          string `json:"status"`
	AmountMinor     int64  `json:"amount_minor"`
	Currency        string `json:"currency"`
	MerchantOrderNo string `json:"merchant_order_no"`
}

// paymentsDesc is the hand-written service descriptor of idemops.demo.v1.Payments.
var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "idemops.demo.v1.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(ChargeRequest)
		if err := dec(in); err != nil { // bad input is the caller's error, not Internal
			return nil, status.Error(codes.InvalidArgument, "the request is not a JSON ChargeRequest")
		}
		if ic == nil {
			return chargeUnguarded(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: GRPCChargeMethod}, chargeUnguarded)
	}}},
}

// chargeUnguarded is the registered handler; the idempotency interceptor runs the charge
// Operation instead, so it only answers when that interceptor is missing.
func chargeUnguarded(context.Context, any) (any, error) {
	return nil, status.Error(codes.Unimplemented, "payments.Charge runs only behind the idempotency interceptor")
}

// GRPCServer is the payment call over gRPC: the same charge Operation, validators and bearer
// keys as the HTTP route, through grpcidem.
func (s *Service) GRPCServer() (*grpc.Server, error) {
	idem, err := grpcidem.NewServerInterceptor(grpcidem.Config{Store: s.store, Service: "payments-grpc", Answers: s.answers,
		Tenant: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			v := md.Get("authorization")
			if len(v) != 1 {
				return "", errors.New("send one authorization: Bearer <api key>")
			}
			tok, ok := strings.CutPrefix(v[0], "Bearer ")
			if !ok {
				return "", errors.New("no bearer token")
			}
			return s.tenantOf(tok)
		},
		Methods: map[string]grpcidem.Method{GRPCChargeMethod: {
			Run:        s.charge,
			Response:   func() any { return new(ChargeReply) },
			ResourceID: func(r any) string { return r.(*ChargeReply).PaymentID },
			Validate:   []grpcidem.Validator{grpcRefusal(validateCharge)},
		}},
	})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem), grpc.MaxRecvMsgSize(16<<10))
	srv.RegisterService(&paymentsDesc, s)
	return srv, nil
}

// grpcRefusal lets the HTTP route's validator serve gRPC: its refusal names the same field.
func grpcRefusal(v httpidem.Validator) grpcidem.Validator {
	return func(body []byte) error {
		err := v(body)
		var r *httpidem.Refusal
		if errors.As(err, &r) {
			return grpcidem.NewRefusal(r.Field, r.Reason)
		}
		return err
	}
}
