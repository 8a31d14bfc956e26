package daemon

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Instrumented is implemented by jobs that export metrics of their own (the reclaimer's keys
// needing attention); Register registers them with the daemon's registerer.
type Instrumented interface {
	Collectors() []prometheus.Collector
}

// metrics are the daemon's own series, per job.
type metrics struct {
	runs        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	running     *prometheus.GaugeVec
	leader      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idemops", Subsystem: "daemon", Name: "job_runs_total",
			Help: "Job runs by job and final status.",
		}, []string{"job", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idemops", Subsystem: "daemon", Name: "job_run_duration_seconds",
			Help:    "How long job runs took, by job.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 15, 60, 300, 900, 3600},
		}, []string{"job"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "idemops", Subsystem: "daemon", Name: "job_last_success_timestamp_seconds",
			Help: "Unix time of each job's last successful run.",
		}, []string{"job"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "idemops", Subsystem: "daemon", Name: "job_running",
			Help: "Runs of each job under way in this replica.",
		}, []string{"job"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idemops", Subsystem: "daemon", Name: "is_leader",
			Help: "1 while this replica holds the leader lease.",
		}),
	}
	var err error
	if m.runs, err = register(reg, m.runs); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.lastSuccess, err = register(reg, m.lastSuccess); err != nil {
		return nil, err
	}
	if m.running, err = register(reg, m.running); err != nil {
		return nil, err
	}
	if m.leader, err = register(reg, m.leader); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the identical collector registered before (two daemons, or a
// daemon and `jobs run`, in one process share the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
