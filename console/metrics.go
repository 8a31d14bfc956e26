package console

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the console's Prometheus counters, on a registry of its own so several servers
// (tests, serve + demo) do not collide.
type metrics struct {
	reg      *prometheus.Registry
	logins   *prometheus.CounterVec
	reveals  prometheus.Counter
	checks   *prometheus.CounterVec
	requests *prometheus.CounterVec
	refusals *prometheus.CounterVec
	handler  http.Handler
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_console_logins_total",
			Help: "Sign-in attempts by result (success, failure, throttled)."}, []string{"result"}),
		reveals: prometheus.NewCounter(prometheus.CounterOpts{Name: "idemops_console_reveals_total",
			Help: "Reveals of redacted request/response bodies."}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_console_downstream_checks_total",
			Help: "Downstream checks by answer (found, not_found, error)."}, []string{"answer"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_console_http_requests_total",
			Help: "HTTP requests by route pattern and status."}, []string{"route", "status"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_console_refusals_total",
			Help: "Refused actions of signed-in operators (out of scope, role too low), by action or route; the audit log holds one row per operator, action and minute with its count."},
			[]string{"action"}),
	}
	m.reg.MustRegister(m.logins, m.reveals, m.checks, m.requests, m.refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (s *Server) countRequests(c *gin.Context) {
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	s.metrics.requests.WithLabelValues(route, strconv.Itoa(c.Writer.Status())).Inc()
}

func (s *Server) metricsPage(c *gin.Context, _ *request) error {
	s.metrics.handler.ServeHTTP(c.Writer, c.Request)
	return nil
}

// Registerer is the registry /metrics serves: processes that run more than the console (serve,
// demo) register their daemon's collectors here so one endpoint shows everything.
func (s *Server) Registerer() prometheus.Registerer { return s.metrics.reg }
