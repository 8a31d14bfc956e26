package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/downstream/paysim"
	idemproto "github.com/idemops/idemops/proto"
)

// The payments service over gRPC is described by proto/idemops/demo/v1/payments.proto, compiled
// from the embedded file when the server is built and registered with the process's proto
// registry, where reflection finds it. Its one method takes that file's messages (protobuf, what
// grpcurl and generated clients send) or the same fields as JSON with the "json" codec
// (application/grpc+json): both become the ChargeRequest below, whose JSON is the HTTP route's
// body, so the intent fields, the fingerprint and the stored answer are the HTTP route's — a key
// used over one transport replays over the other.
func init() { encoding.RegisterCodec(grpcidem.JSONCodec{}) }

// GRPCChargeMethod is the full name of the payment call over gRPC.
const GRPCChargeMethod = "/idemops.demo.v1.Payments/Charge"

// GRPCTipMethod is the full name of the tip call: a plain handler (no Operation, not
// Transactional) that charges the channel itself.
const GRPCTipMethod = "/idemops.demo.v1.Payments/Tip"

// OperationTip is the tip's idempotency scope.
const OperationTip = "payment.tip"

// MetadataPaysimFault carries a paysim fault on a tip call (demo traffic only), as
// X-Paysim-Fault does on POST /v1/payments.
const MetadataPaysimFault = "x-paysim-fault"

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

// paymentsDesc is the service descriptor of idemops.demo.v1.Payments: the handler decodes the
// call's message in the call's codec, runs the interceptors on the ChargeRequest, and answers in
// the same codec.
var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "idemops.demo.v1.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		wire := protoWire(ctx)
		in, err := decodeChargeRequest(wire, dec)
		if err != nil {
			return nil, err
		}
		var resp any
		if ic == nil {
			resp, err = chargeUnguarded(ctx, in)
		} else {
			resp, err = ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: GRPCChargeMethod}, chargeUnguarded)
		}
		if err != nil || !wire {
			return resp, err
		}
		return chargeReplyMessage(resp), nil
	}}, {MethodName: "Tip", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		wire := protoWire(ctx)
		in, err := decodeChargeRequest(wire, dec)
		if err != nil {
			return nil, err
		}
		tip := srv.(*Service).tip
		var resp any
		if ic == nil {
			resp, err = tip(ctx, in)
		} else {
			resp, err = ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: GRPCTipMethod}, tip)
		}
		if err != nil || !wire {
			return resp, err
		}
		return tipReplyMessage(resp), nil
	}}},
	Metadata: "idemops/demo/v1/payments.proto",
}

// decodeChargeRequest reads a call's ChargeRequest in the call's codec; bad input is the
// caller's error (InvalidArgument), not Internal.
func decodeChargeRequest(wire bool, dec func(any) error) (*ChargeRequest, error) {
	if wire {
		m := dynamicpb.NewMessage(paymentsMessages().request)
		if err := dec(m); err != nil {
			return nil, status.Error(codes.InvalidArgument, "the request is not an idemops.demo.v1.ChargeRequest")
		}
		return chargeRequestOf(m), nil
	}
	in := new(ChargeRequest)
	if err := dec(in); err != nil {
		return nil, status.Error(codes.InvalidArgument, "the request is not a JSON ChargeRequest")
	}
	return in, nil
}

// TipReply is the tip call's answer: the channel's charge.
type TipReply struct {
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
}

// tip is a plain handler, written as a service author would: one charge at the channel
// without the channel's idempotency key (merchant order number: the key's downstream key), an
// Unavailable when the channel does not answer. Whether such a charge happened is unknown to
// the handler; grpcidem holds the key then, and no retry runs the handler again.
func (s *Service) tip(ctx context.Context, in any) (any, error) {
	r := in.(*ChargeRequest)
	l := grpcidem.Lease(ctx)
	if l == nil || s.channel == nil {
		return nil, status.Error(codes.Unimplemented, "payments.Tip runs only behind the idempotency interceptor, with a channel")
	}
	fault := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(MetadataPaysimFault); len(v) == 1 {
			fault = v[0]
		}
	}
	req := paysim.ChargeRequest{AmountMinor: r.AmountMinor, Currency: r.Currency, MerchantOrderNo: l.DownstreamKey,
		Payee: r.Payee, Description: "tip"}
	if rt, ok := ChannelRoutes.For(r.Currency, l.DownstreamKey); ok {
		// The key records where the tip went, as the charge's Operation does.
		req.Channel, l.ChannelAccount = rt.Channel, rt.Account
	}
	ch, err := s.channel.CreateCharge(ctx, "", req, fault)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "the channel did not answer the tip")
	}
	return &TipReply{ChargeID: ch.ID, Status: ch.Status}, nil
}

// tipReplyMessage writes a tip's answer as a protobuf TipReply.
func tipReplyMessage(resp any) *dynamicpb.Message {
	m := dynamicpb.NewMessage(paymentsMessages().tipReply)
	r, ok := resp.(*TipReply)
	if !ok || r == nil {
		return m
	}
	f := m.Descriptor().Fields()
	m.Set(f.ByName("charge_id"), protoreflect.ValueOfString(r.ChargeID))
	m.Set(f.ByName("status"), protoreflect.ValueOfString(r.Status))
	return m
}

// protoWire says whether the call came in protobuf (content type application/grpc or
// application/grpc+proto) rather than JSON.
func protoWire(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	ct := md.Get("content-type")
	return len(ct) == 0 || ct[0] == "application/grpc" || strings.HasPrefix(ct[0], "application/grpc+proto")
}

// paymentsProtoFile is proto/idemops/demo/v1/payments.proto's import path.
const paymentsProtoFile = "idemops/demo/v1/payments.proto"

type paymentsDescriptors struct {
	file                     protoreflect.FileDescriptor
	request, reply, tipReply protoreflect.MessageDescriptor
}

// paymentsMessages compiles payments.proto once and registers it with the proto registry
// (reflection answers from there). The file is embedded, so a failure is a broken build.
var paymentsMessages = sync.OnceValue(func() paymentsDescriptors {
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: func(path string) (io.ReadCloser, error) {
		return idemproto.Files.Open(path)
	}}}
	files, err := c.Compile(context.Background(), paymentsProtoFile)
	if err != nil {
		panic(fmt.Sprintf("demo: compile %s: %v", paymentsProtoFile, err))
	}
	fd, err := protodesc.NewFile(protodesc.ToFileDescriptorProto(files[0]), protoregistry.GlobalFiles)
	if err == nil {
		err = protoregistry.GlobalFiles.RegisterFile(fd)
	}
	if err != nil {
		panic(fmt.Sprintf("demo: register %s: %v", paymentsProtoFile, err))
	}
	return paymentsDescriptors{file: fd, request: fd.Messages().ByName("ChargeRequest"), reply: fd.Messages().ByName("ChargeReply"),
		tipReply: fd.Messages().ByName("TipReply")}
})

// chargeRequestOf reads a protobuf ChargeRequest into the request the interceptors take.
func chargeRequestOf(m *dynamicpb.Message) *ChargeRequest {
	f := m.Descriptor().Fields()
	str := func(name protoreflect.Name) string { return m.Get(f.ByName(name)).String() }
	return &ChargeRequest{AmountMinor: m.Get(f.ByName("amount_minor")).Int(), Currency: str("currency"),
		MerchantOrderNo: str("merchant_order_no"), Payee: str("payee"), Description: str("description"), ClientTS: str("client_ts")}
}

// chargeReplyMessage writes the interceptors' answer as a protobuf ChargeReply.
func chargeReplyMessage(resp any) *dynamicpb.Message {
	m := dynamicpb.NewMessage(paymentsMessages().reply)
	r, ok := resp.(*ChargeReply)
	if !ok || r == nil {
		return m
	}
	f := m.Descriptor().Fields()
	m.Set(f.ByName("payment_id"), protoreflect.ValueOfString(r.PaymentID))
	m.Set(f.ByName("status"), protoreflect.ValueOfString(r.Status))
	m.Set(f.ByName("amount_minor"), protoreflect.ValueOfInt64(r.AmountMinor))
	m.Set(f.ByName("currency"), protoreflect.ValueOfString(r.Currency))
	m.Set(f.ByName("merchant_order_no"), protoreflect.ValueOfString(r.MerchantOrderNo))
	return m
}

// chargeUnguarded is the registered handler; the idempotency interceptor runs the charge
// Operation instead, so it only answers when that interceptor is missing.
func chargeUnguarded(context.Context, any) (any, error) {
	return nil, status.Error(codes.Unimplemented, "payments.Charge runs only behind the idempotency interceptor")
}

// GRPCServer is the payment call over gRPC: the same charge Operation, validators and bearer
// keys as the HTTP route, through grpcidem.
func (s *Service) GRPCServer() (*grpc.Server, error) {
	idem, err := grpcidem.NewServerInterceptor(grpcidem.Config{Store: s.store, Stores: s.stores, AnswersOf: s.answersOf, Service: "payments-grpc", Answers: s.answers,
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
		}, GRPCTipMethod: {
			Operation:  OperationTip,
			Intent:     claim.IntentSpec{Ignore: []string{"description", "client_ts"}, AmountField: "amount_minor", CurrencyField: "currency"},
			Response:   func() any { return new(TipReply) },
			ResourceID: func(r any) string { return r.(*TipReply).ChargeID },
			Validate:   []grpcidem.Validator{grpcRefusal(validateCharge)},
		}},
	})
	if err != nil {
		return nil, err
	}
	paymentsMessages() // the descriptors reflection serves
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(idem), grpc.MaxRecvMsgSize(16 << 10)}
	if s.tracing != nil {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(s.tracing))))
	}
	srv := grpc.NewServer(opts...)
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
