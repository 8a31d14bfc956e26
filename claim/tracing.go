package claim

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: the claim path is a tree of spans — idemops.claim, idemops.drive, and under it
// idemops.downstream.lookup, idemops.downstream.execute (the charge) and idemops.complete —
// each carrying the key's digest (never the key), its operation and attempt. With tracing off
// (OpenTelemetry's no-op provider) a span costs one context allocation and no attribute is
// built. Every key event a traced call writes carries its trace id (trace_id in the detail), so
// the key's history leads to the trace.

// tracerName is the instrumentation scope of the claim package's spans.
const tracerName = "github.com/idemops/idemops/claim"

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// startSpan starts one of the claim path's spans for the key of l (or digest/operation when l
// is nil), with its attributes only when the span records.
func (s *Store) startSpan(ctx context.Context, name, digest, operation string, attempt int) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("idemops.key_digest", digest), attribute.String("idemops.operation", operation))
		if attempt > 0 {
			span.SetAttributes(attribute.Int("idemops.attempt", attempt))
		}
	}
	return ctx, span
}

// endSpan ends span with err's status.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceDetail adds the trace id of ctx's span to an event's detail (a JSON object); without a
// valid span context (tracing off) the detail is returned unchanged.
func traceDetail(ctx context.Context, detail string) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return detail
	}
	id := `"trace_id":"` + sc.TraceID().String() + `"`
	d := strings.TrimSpace(detail)
	switch {
	case d == "" || d == "{}":
		return "{" + id + "}"
	case strings.HasSuffix(d, "}"):
		return d[:len(d)-1] + "," + id + "}"
	}
	return detail
}

// traceJSON is traceDetail's jsonb operand for events built in SQL ('{}' when off).
func traceJSON(ctx context.Context) string { return traceDetail(ctx, "{}") }
