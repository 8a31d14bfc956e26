package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/templates"
)

// dashboardWindow bounds the per-state figures: counting the whole table would cost a scan
// that grows with it; the recent window is served by the created_at index.
const dashboardWindow = 24 * time.Hour

// scopeSQL is the tenant condition for op ("true" for every tenant) and its arguments.
func scopeSQL(op *Operator) (string, []any) {
	if op.SeesAllTenants() {
		return "true", nil
	}
	if len(op.Tenants) == 0 {
		return "false", nil
	}
	return "tenant IN ?", []any{op.Tenants}
}

type stateCountRow struct {
	Operation string
	State     string
	N         int64
}

type minuteRow struct {
	Minute time.Time
	N      int64
}

func (s *Server) dashboard(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	scope, sargs := scopeSQL(r.op)
	v := templates.DashboardView{Window: "keys created in the last 24 hours"}
	with := func(args ...any) []any { return append(append([]any{}, sargs...), args...) }

	var byState []stateCountRow
	if err := s.db.WithContext(ctx).Raw(`SELECT operation, state, count(*) AS n FROM idempotency_keys
		WHERE `+scope+` AND created_at > now() - ? * interval '1 second'
		GROUP BY operation, state ORDER BY operation, state LIMIT 500`, with(dashboardWindow.Seconds())...).Scan(&byState).Error; err != nil {
		return fmt.Errorf("dashboard: keys by state: %w", err)
	}
	since := time.Now().Add(-dashboardWindow).UTC().Format(time.RFC3339)
	for _, b := range byState {
		q := url.Values{"operation": {b.Operation}, "state": {b.State}, "from": {since}}
		v.ByState = append(v.ByState, templates.StateCount{Operation: b.Operation, State: b.State, N: b.N, Href: "/keys?" + q.Encode()})
	}

	// Open keys of any age: processing (partial reclaim index) and failed_retryable (state index).
	for _, st := range []string{"processing", "failed_retryable"} {
		var n int64
		if err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys WHERE `+scope+` AND state = ?`,
			with(st)...).Scan(&n).Error; err != nil {
			return fmt.Errorf("dashboard: open keys: %w", err)
		}
		v.Open = append(v.Open, templates.Count{Label: strings.ReplaceAll(st, "_", " "), N: n, Href: "/keys?state=" + st})
	}
	var expired, attention int64
	if err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys WHERE `+scope+`
		AND state = 'processing' AND lease_expires_at < now()`, sargs...).Scan(&expired).Error; err != nil {
		return fmt.Errorf("dashboard: expired leases: %w", err)
	}
	if err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys WHERE `+scope+` AND needs_attention`,
		sargs...).Scan(&attention).Error; err != nil {
		return fmt.Errorf("dashboard: needs attention: %w", err)
	}
	v.ExpiredLeases = templates.Count{Label: "expired leases", N: expired, Href: "/keys?state=processing"}
	v.Attention = templates.Count{Label: "need attention", N: attention, Href: "/keys?attention=1"}

	var minutes []minuteRow
	if err := s.db.WithContext(ctx).Raw(`SELECT date_trunc('minute', created_at) AS minute, count(*) AS n
		FROM idempotency_keys WHERE `+scope+` AND created_at > now() - interval '1 hour'
		GROUP BY 1 ORDER BY 1`, sargs...).Scan(&minutes).Error; err != nil {
		return fmt.Errorf("dashboard: claims per minute: %w", err)
	}
	v.Claims = claimsChart(time.Now().UTC(), minutes)

	if err := s.daemonStatus(ctx, r, &v); err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.DashboardPage(chrome(r, "dashboard"), v))
	return nil
}

// claimsChart lays out one bar per minute of the last hour in a 600×150 box.
func claimsChart(now time.Time, rows []minuteRow) templates.Chart {
	const minutes, width, height = 60, 600.0, 140.0
	start := now.Truncate(time.Minute).Add(-(minutes - 1) * time.Minute)
	counts := make([]int64, minutes)
	ch := templates.Chart{StartLabel: start.UTC().Format("15:04 UTC"), EndLabel: now.UTC().Format("15:04 UTC")}
	for _, r := range rows {
		i := int(r.Minute.UTC().Sub(start) / time.Minute)
		if i >= 0 && i < minutes {
			counts[i] += r.N
		}
	}
	for _, n := range counts {
		ch.Total += n
		ch.Max = max(ch.Max, n)
	}
	w := width / minutes
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := height * float64(n) / float64(ch.Max)
		ch.Bars = append(ch.Bars, templates.Bar{
			X: ftoa(float64(i)*w + 1), Y: ftoa(150 - h), W: ftoa(w - 2), H: ftoa(h),
			Title: fmt.Sprintf("%s: %d claims", start.Add(time.Duration(i)*time.Minute).UTC().Format("15:04 UTC"), n)})
	}
	return ch
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// daemonStatus reads the daemon's leader, replicas, schedules and last runs for the dashboard's
// cards (the jobs page's model). When the daemon's tables are missing the page says the daemon
// is not running.
func (s *Server) daemonStatus(ctx context.Context, r *request, v *templates.DashboardView) error {
	var present *string
	if err := s.db.WithContext(ctx).Raw(`SELECT to_regclass('daemon_leader')::text`).Scan(&present).Error; err != nil {
		return fmt.Errorf("dashboard: daemon tables: %w", err)
	}
	if present == nil {
		v.DaemonNote = "Daemon not running: its tables do not exist yet (start `idemops daemon`)."
		return nil
	}
	d, err := s.jobsView(ctx, r, daemon.RunFilter{Limit: 5})
	if err != nil {
		return err
	}
	v.Daemon, v.DaemonRunning = d, d.HasLeader
	if !d.HasLeader {
		v.DaemonNote = "Daemon not running: no replica was ever elected (start `idemops daemon`)."
	}
	return nil
}
