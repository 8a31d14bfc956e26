// Package telemetry turns OpenTelemetry tracing on from the standard environment, the way the
// services around idemops already configure theirs: with OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, spans are exported over OTLP — http/protobuf by
// default, grpc when OTEL_EXPORTER_OTLP_PROTOCOL (or …_TRACES_PROTOCOL) says so — and the W3C
// trace context is propagated; unset, tracing is off (OpenTelemetry's no-op provider: an
// instrumented call costs a few nanoseconds). The exporters read the rest of the standard
// variables themselves (headers, timeouts, TLS); OTEL_SERVICE_NAME names the service.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// ErrProtocol is an OTLP protocol this package does not speak (bad configuration: exit 2).
var ErrProtocol = errors.New("OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc")

// Enabled says whether the environment asks for traces to be exported.
func Enabled() bool {
	return env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Setup installs the global tracer provider and propagator the environment asks for and
// returns the function that flushes and stops it (a no-op when tracing is off). service is the
// default service name when OTEL_SERVICE_NAME is unset.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	switch p := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%q: %w", p, ErrProtocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		service = v
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// env returns the first of the variables that is set.
func env(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}
