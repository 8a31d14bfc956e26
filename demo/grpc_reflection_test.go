package demo_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
)

// TestGRPC_ReflectionDrivesTheServiceAsGrpcurlDoes: a client that knows nothing of the service
// does what grpcurl does — lists the services by reflection, fetches the file that defines
// Payments, builds a ChargeRequest from that descriptor and calls Charge in protobuf — and gets
// the charge, then the replay under the same key (also over the JSON codec: one stored answer);
// grpc.health.v1 answers SERVING for the server and for Payments.
func TestGRPC_ReflectionDrivesTheServiceAsGrpcurlDoes(t *testing.T) {
	e := start(t, paysim.Config{Seed: 12})
	cc, err := grpc.NewClient(e.w.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, svc := range []string{"", "idemops.demo.v1.Payments"} {
		h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, h, err)
		}
	}

	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var services []string
	for _, s := range ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	for _, want := range []string{"idemops.demo.v1.Payments", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v; want %s", services, want)
		}
	}
	fdResp := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "idemops.demo.v1.Payments"}}).GetFileDescriptorResponse()
	set := &descriptorpb.FileDescriptorSet{}
	for _, raw := range fdResp.GetFileDescriptorProto() {
		fdp := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(raw, fdp); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, fdp)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF && err != nil {
		t.Logf("reflection stream end: %v", err)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatal(err)
	}
	d, err := files.FindDescriptorByName("idemops.demo.v1.Payments")
	if err != nil {
		t.Fatal(err)
	}
	method := d.(protoreflect.ServiceDescriptor).Methods().ByName("Charge")
	if method == nil {
		t.Fatal("Payments has no Charge by reflection")
	}

	call := func(key string) (*dynamicpb.Message, metadata.MD) {
		t.Helper()
		in := dynamicpb.NewMessage(method.Input())
		f := method.Input().Fields()
		in.Set(f.ByName("amount_minor"), protoreflect.ValueOfInt64(4321))
		in.Set(f.ByName("currency"), protoreflect.ValueOfString("CNY"))
		in.Set(f.ByName("merchant_order_no"), protoreflect.ValueOfString("ord-refl"))
		in.Set(f.ByName("payee"), protoreflect.ValueOfString("alice"))
		out := dynamicpb.NewMessage(method.Output())
		var trailer metadata.MD
		cctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.key, grpcidem.MetadataKey, key)
		if err := cc.Invoke(cctx, "/idemops.demo.v1.Payments/Charge", in, out, grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("Charge in protobuf: %v", err)
		}
		return out, trailer
	}
	first, tr := call("refl-1")
	f := method.Output().Fields()
	id := first.Get(f.ByName("payment_id")).String()
	if id == "" || first.Get(f.ByName("status")).String() != "succeeded" || first.Get(f.ByName("amount_minor")).Int() != 4321 || grpcidem.Replayed(tr) {
		t.Fatalf("first charge: %v (trailer %v)", first, tr)
	}
	again, tr := call("refl-1")
	if again.Get(f.ByName("payment_id")).String() != id || !grpcidem.Replayed(tr) {
		t.Errorf("the retry: %v (trailer %v); want the replay of %s", again, tr, id)
	}
	r := e.grpc().charge(e.key, "refl-1", demo.ChargeRequest{AmountMinor: 4321, Currency: "CNY", MerchantOrderNo: "ord-refl", Payee: "alice"})
	if r.err != nil || r.reply.PaymentID != id || !r.replayed() {
		t.Errorf("the same key over the JSON codec: %+v %v; want the replay of %s", r.reply, r.err, id)
	}
}
