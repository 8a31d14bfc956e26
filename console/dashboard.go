package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/templates"
)

// dashboardWindow bounds the per-state figures: counting the whole table would cost a scan
// that grows with it; the recent window is served by the created_at index.
const dashboardWindow = 24 * time.Hour

// scopeSQL is the tenant condition for op ("true" for every tenant) and its arguments.
func scopeSQL(op *access.Operator) (string, []any) {
	cond, args, _ := keyScope(op).SQL()
	return cond, args
}

// dashboard is GET /: the key store at a glance. Its live part polls the same address; an htmx
// request gets that part alone, and every page polling within liveTTL shares one computation of
// the view per role and scope (s.live). A page loaded whole reads the database.
func (s *Server) dashboard(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	view, err := s.live.get(ctx, liveScopeKey("dashboard", r.op), !isHTMX(c), func(ctx context.Context) (any, error) {
		ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over leaves its figures out, named
		v, err := s.dashboardView(ctx, r)
		v.Unavailable = missed.list()
		return v, err
	})
	if err != nil {
		return err
	}
	v := view.(templates.DashboardView)
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.DashboardLive(v))
		return nil
	}
	s.render(c, http.StatusOK, templates.DashboardPage(chrome(r, "dashboard"), v))
	return nil
}

// dashboardView reads the dashboard's figures in r's scope.
func (s *Server) dashboardView(ctx context.Context, r *request) (templates.DashboardView, error) {
	scope := s.keyScope(r.op)
	v := templates.DashboardView{Window: "keys created in the last 24 hours"}

	byState, err := s.countByState(ctx, scope)
	if err != nil {
		return v, fmt.Errorf("dashboard: %w", err)
	}
	since := time.Now().Add(-dashboardWindow).UTC().Format(time.RFC3339)
	for _, b := range byState {
		q := url.Values{"operation": {b.Operation}, "state": {string(b.State)}, "from": {since}}
		v.ByState = append(v.ByState, templates.StateCount{Operation: b.Operation, State: string(b.State), N: b.N, Href: "/keys?" + q.Encode()})
	}

	// Open keys of any age, and what needs an operator: backlogs of any age, each counted up to
	// dashboardCap (shown "10,000+" past it) so a view costs the same whatever the backlog.
	att, err := s.attention(ctx, r, s.backlogCap())
	if err != nil {
		return v, fmt.Errorf("dashboard: %w", err)
	}
	processing, err := s.countKeys(ctx, scope, keys.InState(claim.StateProcessing), s.backlogCap())
	if err != nil {
		return v, fmt.Errorf("dashboard: open keys: %w", err)
	}
	v.Open = append(v.Open, templates.Count{Label: "processing", N: processing.N, Capped: processing.Capped,
		Href: "/keys?state=" + string(claim.StateProcessing)})
	v.Attention = templates.Count{Label: "need attention", Href: "#attention"}
	for _, a := range att {
		v.Attention.N += a.N
		v.Attention.Capped = v.Attention.Capped || a.Capped
		v.AttentionItems = append(v.AttentionItems, templates.Count{Label: a.Label, N: a.N, Capped: a.Capped, Href: a.Href})
		if a.Name == "failed_retryable" { // the Open card's too: counted once
			v.Open = append(v.Open, templates.Count{Label: "failed retryable", N: a.N, Capped: a.Capped, Href: a.Href})
		}
	}
	// Keys whose outcome is unknown overlap failed retryable and needing recovery: a card of
	// their own, not part of the sum.
	unresolved, err := s.countKeys(ctx, scope, keys.Unresolved, s.backlogCap())
	if err != nil {
		return v, fmt.Errorf("dashboard: %w", err)
	}
	v.Unresolved = templates.Count{Label: "outcome unknown, kept until resolved", N: unresolved.N, Capped: unresolved.Capped, Href: "/keys?unresolved=1"}

	minutes, err := s.claimsPerMinute(ctx, scope)
	if err != nil {
		return v, fmt.Errorf("dashboard: %w", err)
	}
	v.Claims = claimsChart(time.Now().UTC(), minutes)

	if err := s.daemonStatus(ctx, r, &v); err != nil {
		return v, err
	}
	return v, nil
}

// dashboardCap is how many keys of a backlog the dashboard counts at most (shown "10,000+"
// past it): an exact count reads the backlog's whole index range on every view (650k entries at
// 10M keys for every tenant).
const dashboardCap = 10_000

// backlogCap is dashboardCap, or the small cap a test set.
func (s *Server) backlogCap() int {
	if s.smallCap > 0 {
		return s.smallCap
	}
	return dashboardCap
}

// keyCount is a count of keys; Capped: there are more than N, N being the cap.
type keyCount struct {
	N      int64
	Capped bool
}

// countKeys is keys.CountCapped of b in scope, summed over the cells holding its tenants:
// capped when a cell's count was, or when the sum passes upTo (then N is upTo); upTo 0 counts
// them all.
func (s *Server) countKeys(ctx context.Context, scope keys.Scope, b keys.Backlog, upTo int) (keyCount, error) {
	ns, err := eachCell(ctx, s.cells.For(scope, ""), func(ctx context.Context, c scopedCell) (keyCount, error) {
		n, capped, err := keys.CountCapped(ctx, c.db, c.held, b, upTo)
		return keyCount{n, capped}, err
	})
	var sum keyCount
	for _, n := range ns {
		sum.N += n.N
		sum.Capped = sum.Capped || n.Capped
	}
	if upTo > 0 && (sum.Capped || sum.N > int64(upTo)) {
		sum = keyCount{N: int64(upTo), Capped: true}
	}
	return sum, err
}

// countByState is keys.CountByState of the dashboard's window, summed over the cells holding
// scope's tenants.
func (s *Server) countByState(ctx context.Context, scope keys.Scope) ([]keys.StateCount, error) {
	counts, err := eachCell(ctx, s.cells.For(scope, ""), func(ctx context.Context, c scopedCell) ([]keys.StateCount, error) {
		return keys.CountByState(ctx, c.db, c.held, dashboardWindow)
	})
	if err != nil || len(counts) == 1 {
		return slices.Concat(counts...), err
	}
	return keys.MergeStateCounts(counts), nil
}

// claimsPerMinute is keys.ClaimsPerMinute over the cells holding scope's tenants, one list of
// minutes per cell one after the other (claimsChart adds up a minute's counts).
func (s *Server) claimsPerMinute(ctx context.Context, scope keys.Scope) ([]keys.MinuteCount, error) {
	minutes, err := eachCell(ctx, s.cells.For(scope, ""), func(ctx context.Context, c scopedCell) ([]keys.MinuteCount, error) {
		return keys.ClaimsPerMinute(ctx, c.db, c.held)
	})
	return slices.Concat(minutes...), err
}

// claimsChart lays out one bar per minute of the last hour in a 600×150 box.
func claimsChart(now time.Time, rows []keys.MinuteCount) templates.Chart {
	const minutes, width, height = 60, 600.0, 140.0
	start := now.Truncate(time.Minute).Add(-(minutes - 1) * time.Minute)
	counts := make([]int64, minutes)
	ch := templates.Chart{Start: start, End: now}
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
			Minute: start.Add(time.Duration(i) * time.Minute), N: n})
	}
	return ch
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// daemonStatus reads the daemon's leader, replicas, schedules and last runs for the dashboard's
// cards (the jobs page's model). When the daemon's tables are missing the page says the daemon
// is not running.
func (s *Server) daemonStatus(ctx context.Context, r *request, v *templates.DashboardView) error {
	installed, err := daemon.Installed(ctx, s.db)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if !installed {
		v.DaemonNote = "Daemon not running: its tables do not exist yet (start %s)."
		return nil
	}
	d, err := s.jobsView(ctx, r, daemon.RunFilter{Limit: 5})
	if err != nil {
		return err
	}
	v.Daemon, v.DaemonRunning = d, d.HasLeader
	if !d.HasLeader {
		v.DaemonNote = "Daemon not running: no replica was ever elected (start %s)."
	}
	return nil
}
