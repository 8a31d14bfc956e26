package console

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceRequests makes each console request a server span named by its route ("POST
// /keys/:id/check"), continuing the caller's trace (traceparent). Handlers pass the request's
// context down, so an operator's action — a replay, a downstream check, a hold — traces through
// the claim path, and the key events it writes carry the trace id.
func (s *Server) traceRequests(c *gin.Context) {
	ctx := otel.GetTextMapPropagator().Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	ctx, span := s.tracer.Start(ctx, c.Request.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
	if span.IsRecording() {
		status := c.Writer.Status()
		span.SetAttributes(attribute.String("http.request.method", c.Request.Method), attribute.String("http.route", route),
			attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
}
