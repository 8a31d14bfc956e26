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
// each carrying the key's digest (never the key), its operation and attempt. Every key event a
// traced call writes carries its trace id (trace_id in the detail), so the key's history leads
// to the trace. With tracing off (OpenTelemetry's no-op provider when the store was made) the
// store starts no span at all and adds nothing to a detail: the claim path pays nothing.

// tracerName is the instrumentation scope of the claim package's spans.
const tracerName = "github.com/idemops/idemops/claim"

// newTracer returns tp's tracer (default: the global provider as it is now) and whether it
// traces: a no-op provider's spans have no valid span context, an SDK's always have one
// (sampled or not).
func newTracer(tp trace.TracerProvider) (trace.Tracer, bool) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := tp.Tracer(tracerName)
	// Never ended, so never exported: an SDK exports only ended spans.
	_, probe := t.Start(context.Background(), "idemops.probe")
	return t, probe.SpanContext().IsValid()
}

// noSpan is what startSpan hands out with tracing off.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts one of the claim path's spans, with its attributes only when it records.
func (s *Store) startSpan(ctx context.Context, name, digest, operation string, attempt int) (context.Context, trace.Span) {
	if !s.tracing {
		return ctx, noSpan
	}
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
	if span == noSpan {
		return
	}
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceDetail adds the trace id of ctx's span to an event's detail (a JSON object); with
// tracing off, or no span in ctx, the detail is returned unchanged.
func (s *Store) traceDetail(ctx context.Context, detail string) string {
	if !s.tracing {
		return detail
	}
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
func (s *Store) traceJSON(ctx context.Context) string { return s.traceDetail(ctx, "{}") }
