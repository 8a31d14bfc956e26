package daemon_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestJobRun_IsASpan: each job run is a span named after the job, with its schedule, run and
// final status; a failed run's span has an error status.
func TestJobRun_IsASpan(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	d := newDaemon(t, pgtest.New(t), "traced", func(c *daemon.Config) { c.TracerProvider = tp })
	if err := d.Register(&countingJob{name: "tick"}, "@every 1h"); err != nil {
		t.Fatal(err)
	}
	if err := d.Register(&countingJob{name: "broken", fail: errors.New("channel said no")}, "@every 1h"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tick", "broken"} {
		if _, err := d.RunJob(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	attr := func(s tracetest.SpanStub, key string) string {
		for _, a := range s.Attributes {
			if string(a.Key) == key {
				return a.Value.Emit()
			}
		}
		return ""
	}
	if s, ok := spans["job tick"]; !ok || attr(s, "idemops.job_status") != "succeeded" || attr(s, "idemops.job_run") == "" || s.Status.Code == codes.Error {
		t.Errorf("span of the tick run: %+v", s)
	}
	if s, ok := spans["job broken"]; !ok || attr(s, "idemops.job_status") != "failed" || s.Status.Code != codes.Error {
		t.Errorf("span of the failed run: %+v", s)
	}
}
