package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/templates"
)

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

// jobRunRow is r as shown (its error a phrase; see runError).
func jobRunRow(r daemon.Run) templates.RunRow {
	row := templates.RunRow{ID: r.ID, Href: fmt.Sprintf("/jobs/runs/%d", r.ID), Schedule: r.Schedule, Job: r.Job, Trigger: r.Trigger,
		Replica: r.Replica, Status: string(r.Status), StartedAt: r.StartedAt, DeadlineAt: r.DeadlineAt,
		Phase: r.Phase, Done: r.Done, Total: r.Total,
		Stats: statsText(r.Stats), Error: runError(r)}
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
	runs, cells, err := s.visibleJobRunsIn(ctx, op, f)
	if err != nil {
		return templates.RunsView{}, err
	}
	v := templates.RunsView{Poll: requested, Job: f.Job, Status: string(f.Status), PollHref: "/jobs/runs"}
	if q := runQuery(f); q != "" {
		v.PollHref += "?" + q
		v.Filtered = true
	}
	for i, r := range runs {
		if r.Status == daemon.RunRunning {
			v.Poll = true
		}
		row := jobRunRow(r)
		row.Cell = cells[i]
		v.Rows = append(v.Rows, row)
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
	var err error
	if v.Cells, err = s.cellDaemons(ctx, r.op); err != nil {
		return v, err
	}
	if v.Cells == nil { // one database: its leader and replicas (across cells each cell's row has its own)
		leader, err := daemon.Leader(ctx, s.db)
		if err != nil {
			return v, err
		}
		v.Leader, v.HasLeader = leaderRow(leader)
		replicas, err := daemon.Replicas(ctx, s.db)
		if err != nil {
			return v, err
		}
		for _, rp := range replicas {
			v.Replicas = append(v.Replicas, replicaRow(rp))
		}
	}
	schedules, err := s.visibleSchedulesIn(ctx, r.op)
	if err != nil {
		return v, err
	}
	requested := false
	for _, sc := range schedules {
		row := templates.ScheduleRow{Name: sc.Name, Cell: sc.Cell, DOM: sc.Name, Job: sc.Job, Spec: sc.Spec, TimeZone: sc.TimeZone,
			Params: string(sc.Params), NextRunAt: sc.NextRunAt, Paused: sc.Paused, Requested: sc.RunRequestedAt != nil}
		if sc.Cell != "" { // names repeat across cells
			row.DOM = sc.Name + "@" + sc.Cell
		}
		if row.Params == "{}" {
			row.Params = ""
		}
		if sc.LastRun != nil {
			row.LastStatus, row.LastStarted = string(sc.LastRun.Status), sc.LastRun.StartedAt
			row.LastError = runError(*sc.LastRun)
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
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' daemons and runs, and its name
	v, err := s.jobsView(ctx, r, f)
	v.Unavailable = missed.list()
	v.Runs.Unavailable = v.Unavailable // the polled table names them too: it replaces itself
	return v, err
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

// apiJobs is GET /api/v1/jobs: the leader, replicas, schedules and recent runs. Across cells,
// like the dashboard's, a cell that does not answer is left out and named in cells_unavailable.
func (s *Server) apiJobs(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx)
	leader, err := daemon.Leader(ctx, s.db)
	if err != nil {
		return err
	}
	replicas, err := daemon.Replicas(ctx, s.db)
	if err != nil {
		return err
	}
	schedules, err := s.visibleSchedulesIn(ctx, r.op) // each cell's, naming it
	if err != nil {
		return err
	}
	runs, err := s.visibleJobRuns(ctx, r.op, daemon.RunFilter{Limit: jobRunsShown})
	if err != nil {
		return err
	}
	out := gin.H{"leader": leader, "replicas": replicas, "schedules": schedules, "runs": runs}
	if s.cells.cells != nil { // each cell's daemon, schedules and runs; the leader and replicas are the control cell's
		cells, err := s.cellDaemons(ctx, r.op)
		if err != nil {
			return err
		}
		type cellDaemon struct {
			Name      string     `json:"name"`
			Leader    *cellLease `json:"leader"`
			Replicas  int        `json:"replicas"`
			Schedules int        `json:"schedules"`
			Failed    int        `json:"failed"`
			Running   int        `json:"running"`
		}
		list := make([]cellDaemon, 0, len(cells))
		for _, c := range cells {
			if c.Down { // named in cells_unavailable
				continue
			}
			cd := cellDaemon{Name: c.Name, Replicas: c.Replicas, Schedules: c.Schedules, Failed: c.Failed, Running: c.Running}
			if c.HasLeader {
				cd.Leader = &cellLease{ID: c.Leader.ID, Term: c.Leader.Term, ElectedAt: c.Leader.ElectedAt, ExpiresAt: c.Leader.ExpiresAt, Expired: c.Leader.Expired}
			}
			list = append(list, cd)
		}
		out["cells"], out["control"] = list, s.controlName()
		runs, names, err := s.visibleJobRunsIn(ctx, r.op, daemon.RunFilter{Limit: jobRunsShown})
		if err != nil {
			return err
		}
		type cellRun struct {
			daemon.Run
			Cell string `json:"cell"`
		}
		all := make([]cellRun, len(runs))
		for i := range runs {
			all[i] = cellRun{runs[i], names[i]}
		}
		out["runs"] = all // every cell's, newest first, each naming its cell
		if gone := missed.list(); len(gone) > 0 {
			out["cells_unavailable"] = gone // their daemons and runs are left out
		}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// cellLease is a cell's leader as /api/v1/jobs names it.
type cellLease struct {
	ID        string    `json:"id"`
	Term      int64     `json:"term"`
	ElectedAt time.Time `json:"elected_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Expired   bool      `json:"expired"`
}
