package telemetry_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/idemops/idemops/internal/telemetry"
)

// received collects what an OTLP receiver got: span names and each batch's service.name.
type received struct {
	mu       sync.Mutex
	spans    []string
	services []string
}

func (r *received) add(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				r.services = append(r.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
}

func (r *received) has(span, service string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for _, s := range r.spans {
		found = found || s == span
	}
	for _, s := range r.services {
		if s == service {
			return found
		}
	}
	return false
}

// exportOneSpan sets tracing up from the environment, records a span and flushes it.
func exportOneSpan(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shutdown, err := telemetry.Setup(ctx, "idemops")
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("telemetry-test").Start(ctx, name)
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// TestSetup_ExportsOverOTLPHTTPAndGRPCFromTheStandardEnvironment: with the standard variables
// set, a span reaches a real OTLP receiver started here — over HTTP (http/protobuf, the
// default) and over gRPC — under OTEL_SERVICE_NAME.
func TestSetup_ExportsOverOTLPHTTPAndGRPCFromTheStandardEnvironment(t *testing.T) {
	var got received
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectorpb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		got.add(req)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer ts.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ts.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "idemops-test")
	exportOneSpan(t, "over-http")
	if !got.has("over-http", "idemops-test") {
		t.Errorf("the OTLP/HTTP receiver got spans %v from %v", got.spans, got.services)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, grpcReceiver{got: &got})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	exportOneSpan(t, "over-grpc")
	if !got.has("over-grpc", "idemops-test") {
		t.Errorf("the OTLP/gRPC receiver got spans %v", got.spans)
	}
}

type grpcReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	got *received
}

func (g grpcReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	g.got.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// TestSetup_OffWithoutAnEndpoint: with no endpoint set nothing is installed (the global
// provider stays OpenTelemetry's no-op), and an unknown protocol is refused.
func TestSetup_OffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	before := otel.GetTracerProvider()
	shutdown, err := telemetry.Setup(context.Background(), "idemops")
	if err != nil || telemetry.Enabled() || otel.GetTracerProvider() != before || shutdown(context.Background()) != nil {
		t.Errorf("Setup without an endpoint: %v; enabled %v; provider replaced %v", err, telemetry.Enabled(), otel.GetTracerProvider() != before)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := telemetry.Setup(context.Background(), "idemops"); !errors.Is(err, telemetry.ErrProtocol) {
		t.Errorf("protocol http/json: %v; want ErrProtocol", err)
	}
}
