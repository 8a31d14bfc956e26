package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/templates"
)

// The daemon's pages read its tables through the daemon package and steer it the way the
// daemon itself is steered: run now, pause and resume are rows the leader reads at its next
// poll, written together with their audit row. Running a job now is an operator's call;
// pausing and resuming stop or restart a safety net (the reclaimer, the purge), so they are
// an administrator's.

// jobsNotices are the fixed messages a redirect after a job action may show.
var jobsNotices = map[string]string{
	"run":    "Run requested: the leader starts it at its next poll.",
	"pause":  "Schedule paused: its regular runs stop until it is resumed (run now still works).",
	"resume": "Schedule resumed.",
}

// jobRunsShown is how many runs the jobs page lists.
const jobRunsShown = 30

func statsText(s daemon.Stats) string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, s[k])
	}
	return strings.Join(parts, " ")
}

// runStatuses are the statuses the runs filter offers.
var runStatuses = []daemon.RunStatus{daemon.RunRunning, daemon.RunSucceeded, daemon.RunFailed, daemon.RunAbandoned, daemon.RunTimedOut}

// runFilter reads the runs filter from the query (?job=, ?status=): an unknown status is a 400
// naming the field.
func runFilter(c *gin.Context) (daemon.RunFilter, error) {
	f := daemon.RunFilter{Limit: jobRunsShown, Job: strings.TrimSpace(c.Query("job")), Status: daemon.RunStatus(c.Query("status"))}
	if f.Status != "" && !slices.Contains(runStatuses, f.Status) {
		return f, inputErr("status", "%q is not a run status (running, succeeded, failed, abandoned, timed_out)", f.Status)
	}
	if len(f.Job) > 128 {
		return f, inputErr("job", "longer than 128 characters")
	}
	return f, nil
}

// jobRunRow is r as shown in ctx's language (its error said from its phrase; see runError).
func jobRunRow(ctx context.Context, r daemon.Run) templates.RunRow {
	row := templates.RunRow{ID: r.ID, Href: fmt.Sprintf("/jobs/runs/%d", r.ID), Schedule: r.Schedule, Job: r.Job, Trigger: r.Trigger,
		Replica: r.Replica, Status: string(r.Status), StartedAt: r.StartedAt, DeadlineAt: r.DeadlineAt,
		Duration: r.Duration().Round(time.Millisecond).String(), Phase: r.Phase, Done: r.Done, Total: r.Total,
		Stats: statsText(r.Stats), Error: truncate(runError(ctx, r), 300)}
	if r.FinishedAt != nil {
		row.FinishedAt = *r.FinishedAt
	}
	if r.ProgressAt != nil {
		row.ProgressAt = *r.ProgressAt
	}
	if r.Term != nil {
		row.Term = *r.Term
	}
	return row
}

func (s *Server) runsView(ctx context.Context, op *access.Operator, requested bool, f daemon.RunFilter) (templates.RunsView, error) {
	runs, err := s.visibleJobRuns(ctx, op, f)
	if err != nil {
		return templates.RunsView{}, err
	}
	v := templates.RunsView{Poll: requested, Job: f.Job, Status: string(f.Status), PollHref: "/jobs/runs"}
	if q := runQuery(f); q != "" {
		v.PollHref += "?" + q
		v.Filtered = true
	}
	for _, r := range runs {
		if r.Status == daemon.RunRunning {
			v.Poll = true
		}
		v.Rows = append(v.Rows, jobRunRow(ctx, r))
	}
	return v, nil
}

func runQuery(f daemon.RunFilter) string {
	q := url.Values{}
	if f.Job != "" {
		q.Set("job", f.Job)
	}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	return q.Encode()
}

func (s *Server) jobsView(ctx context.Context, r *request, f daemon.RunFilter) (templates.JobsView, error) {
	v := templates.JobsView{CanRun: r.op.Role >= access.RoleOperator, CanPause: r.op.Role >= access.RoleAdmin}
	leader, err := daemon.Leader(ctx, s.db)
	if err != nil {
		return v, err
	}
	if leader != nil {
		v.HasLeader = true
		v.Leader = templates.LeaderRow{ID: leader.LeaderID, Term: leader.Term, ElectedAt: leader.ElectedAt,
			ExpiresAt: leader.ExpiresAt, Expired: leader.Expired}
	}
	replicas, err := daemon.Replicas(ctx, s.db)
	if err != nil {
		return v, err
	}
	for _, rp := range replicas {
		v.Replicas = append(v.Replicas, templates.ReplicaRow{ID: rp.ID, Name: rp.Name, Host: rp.Host, PID: rp.PID,
			StartedAt: rp.StartedAt, LastSeen: rp.LastSeen, IsLeader: rp.IsLeader})
	}
	schedules, err := s.visibleSchedules(ctx, r.op)
	if err != nil {
		return v, err
	}
	requested := false
	for _, sc := range schedules {
		row := templates.ScheduleRow{Name: sc.Name, Job: sc.Job, Spec: sc.Spec, TimeZone: sc.TimeZone,
			Params: string(sc.Params), NextRunAt: sc.NextRunAt, Paused: sc.Paused, Requested: sc.RunRequestedAt != nil}
		if row.Params == "{}" {
			row.Params = ""
		}
		if sc.LastRun != nil {
			row.LastStatus, row.LastStarted = string(sc.LastRun.Status), sc.LastRun.StartedAt
			row.LastError = truncate(runError(ctx, *sc.LastRun), 200)
		}
		requested = requested || row.Requested
		v.Schedules = append(v.Schedules, row)
	}
	if v.Runs, err = s.runsView(ctx, r.op, requested, f); err != nil {
		return v, err
	}
	for _, st := range runStatuses {
		v.Runs.Statuses = append(v.Runs.Statuses, string(st))
	}
	for _, sc := range v.Schedules {
		if !slices.Contains(v.Runs.Jobs, sc.Job) {
			v.Runs.Jobs = append(v.Runs.Jobs, sc.Job)
		}
	}
	return v, nil
}

// jobRunParam is the job run the path names (the page and the API).
func (s *Server) jobRunParam(c *gin.Context) (*daemon.Run, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := daemon.GetRun(ctx, s.db, id)
	if errors.Is(err, daemon.ErrUnknownRun) {
		return nil, fmt.Errorf("job run %d: %w", id, ErrNotFound)
	}
	return run, err
}

// runError is a job run's error in ctx's language: said from its phrase when the job's error
// carried one; else the stored text looked up whole (the daemon's own fixed texts: a run left
// by an earlier leader, one stopped before its pass was complete), or as it is.
func runError(ctx context.Context, r daemon.Run) string {
	if r.ErrorPhrase.Valid {
		return templates.Say(ctx, r.ErrorPhrase.Phrase)
	}
	return templates.SayText(ctx, r.Error)
}

// jobRunPage is GET /jobs/runs/:id: one run with its progress, timings, stats and error.
func (s *Server) jobRunPage(c *gin.Context, r *request) error {
	run, err := s.jobRunParam(c)
	if err != nil {
		return err
	}
	row := jobRunRow(c.Request.Context(), *run)
	row.Error = runError(c.Request.Context(), *run)
	s.render(c, http.StatusOK, templates.JobRunPage(chrome(r, "jobs"), row))
	return nil
}

// jobsPage is GET /jobs.
func (s *Server) jobsPage(c *gin.Context, r *request) error {
	v, err := s.jobsQuery(c, r)
	if err != nil {
		return err
	}
	v.Notice = jobsNotices[c.Query("notice")]
	s.render(c, http.StatusOK, templates.JobsPage(chrome(r, "jobs"), v))
	return nil
}

// jobsQuery is the jobs view for the request's run filter (the page and its polled table).
func (s *Server) jobsQuery(c *gin.Context, r *request) (templates.JobsView, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	f, err := runFilter(c)
	if err != nil {
		return templates.JobsView{}, err
	}
	return s.jobsView(ctx, r, f)
}

// jobRunsPartial is GET /jobs/runs: the runs table the jobs page polls.
func (s *Server) jobRunsPartial(c *gin.Context, r *request) error {
	v, err := s.jobsQuery(c, r)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.JobRuns(v.Runs))
	return nil
}

// jobAction runs one of the daemon's schedule switches with its audit row, in one transaction.
func (s *Server) jobAction(ctx context.Context, r *request, action, name string) error {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 128 {
		return inputErr("name", "name the schedule (1–128 characters)")
	}
	// The schedule's scope: a recon job's is its channel account's, the others' every tenant's.
	if err := s.authorize(ctx, r, "job."+action, access.ObjSchedule, name); err != nil {
		return err
	}
	apply := map[string]func(context.Context, *gorm.DB, string) error{
		"run": daemon.RunNow, "pause": daemon.Pause, "resume": daemon.Resume}[action]
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := apply(ctx, tx, name); err != nil {
			if errors.Is(err, daemon.ErrUnknownSchedule) {
				return fmt.Errorf("schedule %q: %w", truncate(name, 40), ErrNotFound)
			}
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "job." + action,
			Target: "schedule:" + name, Tenant: s.auditTenantOf(ctx, access.ObjSchedule, name)})
	})
}

func (s *Server) jobActionPage(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		ctx, cancel := s.ctx(c)
		defer cancel()
		if err := s.jobAction(ctx, r, action, c.PostForm("name")); err != nil {
			return err
		}
		c.Redirect(http.StatusSeeOther, "/jobs?notice="+url.QueryEscape(action))
		return nil
	}
}

// apiJobs is GET /api/v1/jobs: the leader, replicas, schedules and recent runs.
func (s *Server) apiJobs(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	leader, err := daemon.Leader(ctx, s.db)
	if err != nil {
		return err
	}
	replicas, err := daemon.Replicas(ctx, s.db)
	if err != nil {
		return err
	}
	schedules, err := s.visibleSchedules(ctx, r.op)
	if err != nil {
		return err
	}
	runs, err := s.visibleJobRuns(ctx, r.op, daemon.RunFilter{Limit: jobRunsShown})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"leader": leader, "replicas": replicas, "schedules": schedules, "runs": runs})
	return nil
}

// apiJobRun is GET /api/v1/jobs/runs/{id}: one run with its progress, stats and error.
func (s *Server) apiJobRun(c *gin.Context, r *request) error {
	run, err := s.jobRunParam(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, run)
	return nil
}

// apiJobAction is POST /api/v1/jobs/{run,pause,resume} {"name": schedule}.
func (s *Server) apiJobAction(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		var b struct {
			Name string `json:"name"`
		}
		if err := bindJSON(c, &b); err != nil {
			return err
		}
		ctx, cancel := s.ctx(c)
		defer cancel()
		if err := s.jobAction(ctx, r, action, b.Name); err != nil {
			return err
		}
		c.JSON(http.StatusAccepted, gin.H{"schedule": b.Name, "action": action})
		return nil
	}
}

// scheduleTenants resolves the tenant set of each named schedule (objectTenants for a list).
func (s *Server) scheduleTenants(ctx context.Context, names []string) (map[string][]string, error) {
	out := make(map[string][]string, len(names))
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		ts, err := s.scope.Tenants(ctx, access.ObjSchedule, n)
		if errors.Is(err, ErrNotFound) {
			ts, err = []string{access.EveryTenant}, nil // a recon job deleted since: "*" only
		}
		if err != nil {
			return nil, err
		}
		out[n] = ts
	}
	return out, nil
}

// visibleSchedules lists the schedules op may see (configuration: sharing a tenant suffices).
func (s *Server) visibleSchedules(ctx context.Context, op *access.Operator) ([]daemon.Schedule, error) {
	all, err := daemon.ListSchedules(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return visibleBySchedule(ctx, s, op, all, access.ObjSchedule, func(sc daemon.Schedule) (string, string) { return sc.Name, sc.Name })
}

// visibleJobRuns lists the recent job runs op may see: those of schedules op covers (a run's
// stats count the keys of every tenant of its schedule).
func (s *Server) visibleJobRuns(ctx context.Context, op *access.Operator, f daemon.RunFilter) ([]daemon.Run, error) {
	runs, err := daemon.ListRuns(ctx, s.db, f)
	if err != nil {
		return nil, err
	}
	return visibleBySchedule(ctx, s, op, runs, access.ObjJobRun, func(r daemon.Run) (string, string) { return r.Schedule, "" })
}

// visibleBySchedule keeps the items op may see as objects of kind whose tenants are their
// schedule's; ref gives an item's schedule and its name in refusals.
func visibleBySchedule[T any](ctx context.Context, s *Server, op *access.Operator, items []T, kind access.ObjectKind,
	ref func(T) (schedule, name string)) ([]T, error) {
	names := make([]string, len(items))
	for i, it := range items {
		names[i], _ = ref(it)
	}
	tenants, err := s.scheduleTenants(ctx, names)
	if err != nil {
		return nil, err
	}
	out := items[:0]
	for _, it := range items {
		schedule, name := ref(it)
		if access.Decide(op, kind, name, tenants[schedule], false) == nil {
			out = append(out, it)
		}
	}
	return out, nil
}
