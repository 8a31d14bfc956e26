package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

// storeCollector reads, at each scrape, what an alert about the deployment as a whole needs from
// the database: whether it answers, which schedules are overdue, how far the outbox is behind.
// Every replica reports the same values (alert on max over instances); a replica that cannot
// reach the database reports idemops_store_up 0 and nothing else.
type storeCollector struct {
	db      *gorm.DB
	timeout time.Duration
}

var (
	storeUpDesc = prometheus.NewDesc("idemops_store_up",
		"1 when the idempotency store's database answered this scrape's queries (within 2 s), 0 when it did not.", nil, nil)
	overdueDesc = prometheus.NewDesc("idemops_daemon_schedule_overdue_seconds",
		"How long past its next_run_at each unpaused schedule is without a run starting (0 when not due): a leader that does not run it, or a run that does not start.",
		[]string{"schedule", "job"}, nil)
	outboxBacklogDesc = prometheus.NewDesc("idemops_outbox_backlog",
		"Outbox rows waiting to be sent (pending or sending; counted up to 10000).", nil, nil)
	outboxOldestDesc = prometheus.NewDesc("idemops_outbox_oldest_pending_age_seconds",
		"Age of the oldest outbox row waiting to be sent (0 when none waits).", nil, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storeUpDesc, overdueDesc, outboxBacklogDesc, outboxOldestDesc} {
		ch <- d
	}
}

// Collect runs two bounded reads: the schedules (a handful of rows) and the outbox's waiting
// rows, read through the relay's partial index outbox_due_idx and capped at 10000 (the oldest is
// the oldest of those).
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	db := c.db.WithContext(ctx)
	var overdue []struct {
		Name, Job string
		Seconds   float64
	}
	err := db.Raw(`SELECT name, job, GREATEST(0, extract(epoch FROM now() - next_run_at))::float8 AS seconds
		FROM schedules WHERE NOT paused`).Scan(&overdue).Error
	var outbox struct {
		Waiting int64
		Oldest  float64
	}
	if err == nil {
		err = db.Raw(`SELECT count(*) AS waiting, COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest
			FROM (SELECT created_at FROM outbox WHERE state IN ('pending', 'sending') LIMIT 10000) w`).Scan(&outbox).Error
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)
	for _, o := range overdue {
		ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, o.Seconds, o.Name, o.Job)
	}
	ch <- prometheus.MustNewConstMetric(outboxBacklogDesc, prometheus.GaugeValue, float64(outbox.Waiting))
	ch <- prometheus.MustNewConstMetric(outboxOldestDesc, prometheus.GaugeValue, outbox.Oldest)
}
