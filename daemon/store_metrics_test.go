package daemon_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestStoreMetrics_WhatTheAlertsRead: a daemon's registry reports the store up, each unpaused
// schedule's lateness (a schedule due an hour ago: about 3600 s overdue) and the outbox
// backlog with its oldest row's age; with the database gone, idemops_store_up is 0.
func TestStoreMetrics_WhatTheAlertsRead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	reg := prometheus.NewRegistry()
	newDaemon(t, db, "metrics", func(c *daemon.Config) { c.Registerer = reg }) // not started: nothing runs the schedule
	pgtest.Exec(t, db, `INSERT INTO schedules (name, job, spec, next_run_at) VALUES ('late', 'late', '@every 1h', now() - interval '1 hour')`)
	pgtest.Exec(t, db, `INSERT INTO outbox (operation, downstream_key, payload, created_at)
		VALUES ('op', 'dk-1', '{}', now() - interval '10 minutes'), ('op', 'dk-2', '{}', now())`)
	want := `
# HELP idemops_outbox_backlog Outbox rows waiting to be sent (pending or sending; counted up to 10000).
# TYPE idemops_outbox_backlog gauge
idemops_outbox_backlog 2
# HELP idemops_store_up 1 when the idempotency store's database answered this scrape's queries (within 2 s), 0 when it did not.
# TYPE idemops_store_up gauge
idemops_store_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemops_store_up", "idemops_outbox_backlog"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "schedule" {
					name += "{" + l.GetValue() + "}"
				}
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	if v := got["idemops_daemon_schedule_overdue_seconds{late}"]; v < 3500 || v > 3700 {
		t.Errorf("the late schedule is %v s overdue; want about 3600", v)
	}
	if v := got["idemops_outbox_oldest_pending_age_seconds"]; v < 590 || v > 700 {
		t.Errorf("the oldest waiting outbox row is %v s old; want about 600", v)
	}

	unreachable, _ := pgtest.Unreachable(t)
	down := prometheus.NewRegistry()
	newDaemon(t, unreachable, "down", func(c *daemon.Config) { c.Registerer = down })
	if v, err := testutil.GatherAndCount(down, "idemops_store_up"); err != nil || v != 1 {
		t.Fatalf("store_up series with the database gone: %d %v", v, err)
	}
	if err := testutil.GatherAndCompare(down, strings.NewReader("# HELP idemops_store_up 1 when the idempotency store's database answered this scrape's queries (within 2 s), 0 when it did not.\n# TYPE idemops_store_up gauge\nidemops_store_up 0\n"), "idemops_store_up"); err != nil {
		t.Error(err)
	}
}
