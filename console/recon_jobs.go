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

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Recon jobs: the reconciliation page (jobs, the create form, channel accounts), a job's page,
// the next-runs preview and the jobs API listing.

// shownSource is a job's source as op is shown it: administrators of every tenant see it with
// its secrets as "***", everyone else without its query and user info (issue 35 item 5).
func shownSource(op *access.Operator, src string) string {
	if op.SeesAllTenants() {
		return reconcile.MaskSource(src)
	}
	return reconcile.RedactSource(src)
}

func jobRow(j reconcile.ReconJob, now time.Time, op *access.Operator) templates.ReconJobRow {
	row := templates.ReconJobRow{Name: j.Name, Channel: j.Channel, Format: j.Format, Source: shownSource(op, j.Source),
		Fetcher: j.Fetcher, Bill: j.Bill,
		Operations: strings.Join(j.Operations, ","), CronSpec: j.CronSpec, TimeZone: j.TimeZone, Enabled: j.Enabled,
		Href: "/reconcile/jobs/" + url.PathEscape(j.Name)}
	if j.Enabled {
		if next, err := reconcile.NextRuns(j.CronSpec, j.TimeZone, now, 1); err == nil && len(next) == 1 {
			row.NextRun = &next[0]
		}
	}
	return row
}

func jobForm(j reconcile.ReconJob, op *access.Operator) templates.ReconJobForm {
	f := templates.ReconJobForm{Original: j.Name, Name: j.Name, Channel: j.Channel, Format: j.Format, Source: shownSource(op, j.Source),
		Bill:       j.Bill,
		Operations: strings.Join(j.Operations, ","), CronSpec: j.CronSpec, TimeZone: j.TimeZone,
		BillDateOffsetDays: strconv.Itoa(j.BillDateOffsetDays), GraceSeconds: strconv.Itoa(j.GraceSeconds),
		Deadline: strconv.Itoa(j.ReadyDeadlineSeconds), Enabled: j.Enabled}
	if fs := j.FeeSchedule; fs != nil {
		f.FeeRateBP, f.FeeFixedMinor, f.FeeRounding = fs.RateBP, strconv.FormatInt(fs.FixedMinor, 10), fs.Rounding
		f.FeeDecimals, f.FeeRefunds = strconv.Itoa(fs.Decimals), fs.Refunds
	}
	return f
}

// nextRuns is the next five run times of a spec (in its zone), or its one-line error in the
// page's language (ctx's).
func nextRuns(ctx context.Context, spec, zone string) templates.NextRunsView {
	if strings.TrimSpace(spec) == "" {
		return templates.NextRunsView{}
	}
	times, err := reconcile.NextRuns(spec, zone, time.Now(), nextRunsShown)
	if err == nil && len(times) == 0 {
		err = inputErr("cron_spec", "the spec never fires")
	}
	if err != nil {
		return templates.NextRunsView{Error: pageMessage(ctx, err)}
	}
	return templates.NextRunsView{Times: times}
}

func (s *Server) reconView(ctx context.Context, r *request) (templates.ReconView, error) {
	v := templates.ReconView{Formats: reconcile.Formats(), CanEdit: r.op.Role >= access.RoleAdmin, CanRun: r.op.Role >= access.RoleOperator,
		Form:      templates.ReconJobForm{TimeZone: "UTC", CronSpec: "0 6 * * *", BillDateOffsetDays: "1", Enabled: true},
		UploadMax: fmt.Sprintf("%d MiB", s.cfg.UploadLimit>>20)}
	jobs, err := s.visibleJobs(ctx, r.op)
	if err != nil {
		return v, err
	}
	now := time.Now()
	var channels []string
	for _, j := range jobs {
		v.Jobs = append(v.Jobs, jobRow(j, now, r.op))
		channels = append(channels, j.Channel)
	}
	kinds, err := s.recon.ChannelKinds(ctx, channels)
	if err != nil {
		return v, err
	}
	for i := range v.Jobs {
		v.Jobs[i].ChannelKind = kinds[v.Jobs[i].Channel]
	}
	v.NextRuns = nextRuns(ctx, v.Form.CronSpec, v.Form.TimeZone)
	if v.Channels, err = s.channelRows(ctx, r); err != nil {
		return v, err
	}
	return v, nil
}

func (s *Server) reconJobView(ctx context.Context, r *request, name string) (templates.ReconJobView, error) {
	j, err := s.recon.GetJob(ctx, name)
	if err != nil {
		return templates.ReconJobView{}, err
	}
	v := templates.ReconJobView{Job: jobRow(*j, time.Now(), r.op), Form: jobForm(*j, r.op), Formats: reconcile.Formats(),
		CanEdit: r.op.Role >= access.RoleAdmin, CanRun: r.op.Role >= access.RoleOperator}
	v.NextRuns = nextRuns(ctx, j.CronSpec, j.TimeZone)
	kinds, err := s.recon.ChannelKinds(ctx, []string{j.Channel})
	if err != nil {
		return v, err
	}
	v.Job.ChannelKind = kinds[j.Channel]
	// The job's recent runs as the runs list shows them: across cells, each with its cells'
	// parts under it; a cell failing over is left out and named.
	runsCtx, missed := s.leaveOutFailedCells(ctx)
	runs, _, err := s.listReconRuns(runsCtx, r.op, reconcile.RunFilter{Job: j.Name, Limit: jobReconRunsShown}, "", jobReconRunsShown)
	if err != nil {
		return v, err
	}
	v.Unavailable = missed.list()
	v.Runs, err = s.runRows(ctx, runs)
	return v, err
}

type apiReconJob struct {
	reconcile.ReconJob
	NextRuns []time.Time `json:"next_runs"`
}

// reconPage is GET /reconcile.
func (s *Server) reconPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.reconView(ctx, r)
	if err != nil {
		return err
	}
	v.Notice = reconNotices[c.Query("notice")]
	s.render(c, http.StatusOK, templates.ReconPage(chrome(r, "reconcile"), v))
	return nil
}

// reconNextRuns is GET /reconcile/next-runs?cron_spec=&time_zone=: the partial the job forms
// refresh as the spec is typed.
func (s *Server) reconNextRuns(c *gin.Context, r *request) error {
	s.render(c, http.StatusOK, templates.NextRuns(nextRuns(c.Request.Context(), c.Query("cron_spec"), c.Query("time_zone"))))
	return nil
}

// reconJobPage is GET /reconcile/jobs/{name}.
func (s *Server) reconJobPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.reconJobView(ctx, r, c.Param("name"))
	if err != nil {
		return err
	}
	v.Notice = reconNotices[c.Query("notice")]
	s.render(c, http.StatusOK, templates.ReconJobPage(chrome(r, "reconcile"), v))
	return nil
}

// apiReconJobs is GET /api/v1/reconcile/jobs: every job with its next five run times.
func (s *Server) apiReconJobs(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	jobs, err := s.visibleJobs(ctx, r.op)
	if err != nil {
		return err
	}
	out := []apiReconJob{}
	for _, j := range jobs {
		next, _ := reconcile.NextRuns(j.CronSpec, j.TimeZone, time.Now(), nextRunsShown)
		if !j.Enabled || next == nil {
			next = []time.Time{}
		}
		j.Source = shownSource(r.op, j.Source)
		out = append(out, apiReconJob{ReconJob: j, NextRuns: next})
	}
	c.JSON(http.StatusOK, gin.H{"jobs": out})
	return nil
}
