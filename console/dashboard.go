package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

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

	if err := s.daemonStatus(ctx, r.op, &v); err != nil {
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
	ch := templates.Chart{StartLabel: start.Format("15:04Z"), EndLabel: now.Format("15:04Z")}
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
			Title: fmt.Sprintf("%s: %d claims", start.Add(time.Duration(i)*time.Minute).Format("15:04Z"), n)})
	}
	return ch
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// daemonStatus reads the daemon's leader row and last job runs. Those tables belong to the
// daemon's migration; when they are missing the page says the daemon is not running. Their
// columns are shown as they are, so the dashboard does not depend on their exact layout.
func (s *Server) daemonStatus(ctx context.Context, op *Operator, v *templates.DashboardView) error {
	var tables struct{ Leader, Runs *string }
	if err := s.db.WithContext(ctx).Raw(`SELECT to_regclass('daemon_leader')::text AS leader, to_regclass('job_runs')::text AS runs`).
		Scan(&tables).Error; err != nil {
		return fmt.Errorf("dashboard: daemon tables: %w", err)
	}
	if tables.Leader == nil || tables.Runs == nil {
		v.DaemonNote = "Daemon not running: its tables do not exist yet (start `idemops daemon`)."
		return nil
	}
	var leader, runs []string
	if err := s.db.WithContext(ctx).Raw(`SELECT row_to_json(d)::text FROM daemon_leader d LIMIT 5`).Scan(&leader).Error; err != nil {
		return fmt.Errorf("dashboard: daemon leader: %w", err)
	}
	// Newest first by the first column (the id) without knowing its name; only runs of the
	// schedules op covers (a run's figures count every tenant of its schedule).
	where, args := "", []any{}
	if !op.SeesAllTenants() {
		scheds, err := s.visibleSchedules(ctx, op)
		if err != nil {
			return err
		}
		names := []string{""}
		for _, sc := range scheds {
			if ts, err := s.objectTenants(ctx, objSchedule, sc.Name); err == nil && covers(op.Tenants, ts) {
				names = append(names, sc.Name)
			}
		}
		where, args = "WHERE schedule IN ?", []any{names}
	}
	if err := s.db.WithContext(ctx).Raw(`SELECT row_to_json(j)::text FROM (SELECT * FROM job_runs `+where+` ORDER BY 1 DESC LIMIT 10) j`, args...).
		Scan(&runs).Error; err != nil {
		return fmt.Errorf("dashboard: job runs: %w", err)
	}
	v.DaemonRunning = len(leader) > 0
	if !v.DaemonRunning {
		v.DaemonNote = "Daemon not running: no replica holds the leader lease."
	}
	v.Leader, v.JobRuns = jsonRows(leader), jsonRows(runs)
	return nil
}

// jsonRows turns row_to_json texts into name/value rows with the columns in a stable order.
func jsonRows(texts []string) []templates.Fields {
	var out []templates.Fields
	for _, t := range texts {
		var m map[string]any
		if json.Unmarshal([]byte(t), &m) != nil {
			continue
		}
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		var row templates.Fields
		for _, k := range names {
			val := m[k]
			var s string
			switch x := val.(type) {
			case nil:
				s = "—"
			case string:
				s = x
			default:
				b, _ := json.Marshal(x)
				s = string(b)
			}
			row = append(row, templates.Field{Name: k, Value: truncate(s, 120)})
		}
		out = append(out, row)
	}
	return out
}
