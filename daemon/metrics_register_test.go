package daemon_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// instrumentedJob is a job exporting the collectors it is given.
type instrumentedJob struct {
	name       string
	collectors []prometheus.Collector
}

func (j instrumentedJob) Name() string                       { return j.name }
func (j instrumentedJob) Collectors() []prometheus.Collector { return j.collectors }
func (j instrumentedJob) RunOnce(context.Context, []byte, daemon.Progress) (daemon.Stats, error) {
	return nil, nil
}

// TestRegister_AJobsMetricsThatCannotBeRegisteredRefuseTheJob: a job whose collector clashes
// with a series already in the registry — the same name under other labels, as a counter
// registered plainly and again under a cell's label would be — is refused by Register, naming
// the job (it would otherwise run with metrics no scrape sees); the identical collector
// registered once more in the same registry (two replicas of one process) is one series, taken.
func TestRegister_AJobsMetricsThatCannotBeRegisteredRefuseTheJob(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Unreachable(t) // nothing here touches the database
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_test_outcomes_total", Help: "Test."}, []string{"outcome"})
	reg.MustRegister(counter)

	cell := newDaemon(t, db, "cell", func(c *daemon.Config) {
		c.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"cell": "a"}, reg)
	})
	err := cell.Register(instrumentedJob{name: "clash", collectors: []prometheus.Collector{counter}}, "")
	if !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Errorf("a job whose counter is registered plainly and again with cell=a: %v, want the registration refused", err)
	}
	if slices.Contains(cell.Jobs(), "clash") {
		t.Error("the refused job was registered")
	}

	plain := prometheus.NewRegistry()
	plain.MustRegister(counter)
	same := newDaemon(t, db, "same", func(c *daemon.Config) { c.Registerer = plain })
	if err := same.Register(instrumentedJob{name: "shared", collectors: []prometheus.Collector{counter}}, ""); err != nil {
		t.Errorf("a job sharing the registry's own collector: %v, want it taken", err)
	}
}
