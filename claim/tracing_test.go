package claim_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemops/idemops/claim"
)

// TestTracing_ClaimPathSpansCarryTheDigestAndEventsTheTraceID: a traced Run is the spans
// idemops.claim, idemops.drive, idemops.downstream.execute and idemops.complete, all in one trace
// and each carrying the key's digest, never the key; a takeover adds idemops.downstream.lookup;
// every key event the traced calls wrote carries that trace's id.
func TestTracing_ClaimPathSpansCarryTheDigestAndEventsTheTraceID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	b := setup(t, func(c *claim.Config) { c.TracerProvider = tp })
	op := newFakeOp()
	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	out, err := b.store.Run(ctx, op, req("traced-key-1", payment(100)))
	root.End()
	if err != nil || out.Kind != claim.Completed {
		t.Fatalf("run: %+v %v", out, err)
	}
	traceID := root.SpanContext().TraceID()
	digest := b.store.Digest("t1", "payment.charge", "traced-key-1")
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), "traced-key-1") {
				t.Errorf("span %s carries the raw key in %s", s.Name, a.Key)
			}
		}
	}
	for _, name := range []string{"idemops.claim", "idemops.drive", "idemops.downstream.execute", "idemops.complete"} {
		s, ok := spans[name]
		if !ok {
			t.Errorf("no span %s among %v", name, spanNames(spans))
			continue
		}
		if s.SpanContext.TraceID() != traceID || attr(s, "idemops.key_digest") != digest || attr(s, "idemops.operation") != "payment.charge" {
			t.Errorf("span %s: trace %s, digest %q, operation %q", name, s.SpanContext.TraceID(), attr(s, "idemops.key_digest"), attr(s, "idemops.operation"))
		}
	}
	evs, err := b.store.History(context.Background(), out.KeyID, 100)
	if err != nil || len(evs) < 2 {
		t.Fatalf("history: %v %v", evs, err)
	}
	for _, e := range evs {
		var d struct {
			TraceID string `json:"trace_id"`
		}
		if json.Unmarshal(e.Detail, &d) != nil || d.TraceID != traceID.String() {
			t.Errorf("event %s: detail %s; want trace_id %s", e.Kind, e.Detail, traceID)
		}
	}

	// A takeover looks downstream up first: that is a span too, in the taker's trace.
	claimed, err := b.store.Claim(context.Background(), req("traced-key-2", payment(200)))
	if err != nil {
		t.Fatal(err)
	}
	b.expireLease(claimed.KeyID)
	op.docs[claimed.Lease.DownstreamKey] = &claim.Document{ResourceID: "pay_2"}
	exp.Reset()
	ctx, root = tp.Tracer("test").Start(context.Background(), "retry")
	if _, err := b.store.Run(ctx, op, req("traced-key-2", payment(200))); err != nil {
		t.Fatal(err)
	}
	root.End()
	found := false
	for _, s := range exp.GetSpans() {
		found = found || (s.Name == "idemops.downstream.lookup" && s.SpanContext.TraceID() == root.SpanContext().TraceID())
	}
	if !found {
		t.Errorf("no idemops.downstream.lookup span in the takeover's trace")
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func spanNames(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
