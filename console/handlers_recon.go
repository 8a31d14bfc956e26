package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Reconciliation: everyone signed in reads jobs, runs and findings; operators run a job now,
// upload a statement and resolve, ignore or recover findings; administrators create, edit,
// enable and disable jobs. The reconciler mirrors a job into the daemon's schedules itself;
// "run now" asks the daemon to run that schedule at its next poll, exactly like the jobs page.
// Job changes are audited right after the reconciler's own transaction, with their outcome;
// finding resolutions are audited by the reconciler through reconAuditor.

var reconNotices = map[string]string{
	"created":  "Recon job created; the daemon runs it on its schedule.",
	"updated":  "Recon job saved.",
	"enabled":  "Recon job enabled.",
	"disabled": "Recon job disabled: its schedule is paused.",
	"run":      "Run requested: the daemon's leader starts it at its next poll.",
	"channel":  "Channel account's tenants saved.",
}

var findingNotices = map[string]string{
	"resolved":  "Finding resolved.",
	"ignored":   "Finding ignored.",
	"recovered": "Recover done: the key was completed from the channel's document and the finding resolved.",
}

const (
	reconRunsShown     = 30
	findingsShown      = 50
	nextRunsShown      = 5
	uploadTimeout      = 15 * time.Minute
	reconStatementFile = "statement"
)

func (s *Server) reconActor(r *request) string { return r.op.Name }

func jobRow(j reconcile.ReconJob, now time.Time) templates.ReconJobRow {
	row := templates.ReconJobRow{Name: j.Name, Channel: j.Channel, Format: j.Format, Source: j.Source,
		Operations: strings.Join(j.Operations, ","), CronSpec: j.CronSpec, TimeZone: j.TimeZone, Enabled: j.Enabled,
		Href: "/reconcile/jobs/" + url.PathEscape(j.Name)}
	if j.Enabled {
		if next, err := reconcile.NextRuns(j.CronSpec, j.TimeZone, now, 1); err == nil && len(next) == 1 {
			row.NextRun = &next[0]
		}
	}
	return row
}

func jobForm(j reconcile.ReconJob) templates.ReconJobForm {
	f := templates.ReconJobForm{Original: j.Name, Name: j.Name, Channel: j.Channel, Format: j.Format, Source: j.Source,
		Operations: strings.Join(j.Operations, ","), CronSpec: j.CronSpec, TimeZone: j.TimeZone,
		BillDateOffsetDays: strconv.Itoa(j.BillDateOffsetDays), GraceSeconds: strconv.Itoa(j.GraceSeconds),
		Deadline: strconv.Itoa(j.ReadyDeadlineSeconds), Enabled: j.Enabled}
	if fs := j.FeeSchedule; fs != nil {
		f.FeeRateBP, f.FeeFixedMinor, f.FeeRounding = fs.RateBP, strconv.FormatInt(fs.FixedMinor, 10), fs.Rounding
		f.FeeDecimals, f.FeeRefunds = strconv.Itoa(fs.Decimals), fs.Refunds
	}
	return f
}

// nextRuns is the next five run times of a spec, or its one-line error.
func nextRuns(spec, zone string) templates.NextRunsView {
	if strings.TrimSpace(spec) == "" {
		return templates.NextRunsView{}
	}
	times, err := reconcile.NextRuns(spec, zone, time.Now(), nextRunsShown)
	if err != nil {
		return templates.NextRunsView{Error: publicMessage(err)}
	}
	v := templates.NextRunsView{}
	for _, t := range times {
		v.Times = append(v.Times, t.Format("Mon 2006-01-02 15:04 MST"))
	}
	if len(v.Times) == 0 {
		v.Error = "cron_spec: the spec never fires"
	}
	return v
}

func (s *Server) reconView(ctx context.Context, r *request) (templates.ReconView, error) {
	v := templates.ReconView{Formats: reconcile.Formats(), CanEdit: r.op.Role >= RoleAdmin, CanRun: r.op.Role >= RoleOperator,
		Form:      templates.ReconJobForm{TimeZone: "UTC", CronSpec: "0 6 * * *", BillDateOffsetDays: "1", Enabled: true},
		UploadMax: fmt.Sprintf("%d MiB", s.cfg.UploadLimit>>20)}
	jobs, err := s.visibleJobs(ctx, r.op)
	if err != nil {
		return v, err
	}
	now := time.Now()
	for _, j := range jobs {
		v.Jobs = append(v.Jobs, jobRow(j, now))
	}
	v.NextRuns = nextRuns(v.Form.CronSpec, v.Form.TimeZone)
	if v.Channels, err = s.channelRows(ctx, r); err != nil {
		return v, err
	}
	return v, nil
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
	s.render(c, http.StatusOK, templates.NextRuns(nextRuns(c.Query("cron_spec"), c.Query("time_zone"))))
	return nil
}

func formInt(field, v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, inputErr(field, "%q is not a whole number", truncate(v, 20))
	}
	return n, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func readJobForm(c *gin.Context) templates.ReconJobForm {
	return templates.ReconJobForm{Name: c.PostForm("name"), Channel: c.PostForm("channel"), Format: c.PostForm("format"),
		Source: c.PostForm("source"), Operations: c.PostForm("operations"), CronSpec: c.PostForm("cron_spec"),
		TimeZone: c.PostForm("time_zone"), BillDateOffsetDays: c.PostForm("bill_date_offset_days"),
		GraceSeconds: c.PostForm("grace_seconds"), Deadline: c.PostForm("ready_deadline_seconds"),
		Enabled: c.PostForm("enabled") == "1", FeeRateBP: strings.TrimSpace(c.PostForm("fee_rate_bp")),
		FeeFixedMinor: c.PostForm("fee_fixed_minor"), FeeRounding: c.PostForm("fee_rounding"),
		FeeDecimals: c.PostForm("fee_decimals"), FeeRefunds: c.PostForm("fee_refunds")}
}

func jobSpec(f templates.ReconJobForm) (reconcile.JobSpec, error) {
	spec := reconcile.JobSpec{Name: f.Name, Channel: f.Channel, Format: f.Format, Source: f.Source,
		Operations: splitList(f.Operations), CronSpec: f.CronSpec, TimeZone: strings.TrimSpace(f.TimeZone), Enabled: f.Enabled}
	var err error
	if spec.BillDateOffsetDays, err = formInt("bill_date_offset_days", f.BillDateOffsetDays); err != nil {
		return spec, err
	}
	if spec.GraceSeconds, err = formInt("grace_seconds", f.GraceSeconds); err != nil {
		return spec, err
	}
	if spec.ReadyDeadlineSeconds, err = formInt("ready_deadline_seconds", f.Deadline); err != nil {
		return spec, err
	}
	if f.FeeRateBP != "" {
		fs := &reconcile.FeeSchedule{RateBP: f.FeeRateBP, Rounding: f.FeeRounding, Refunds: f.FeeRefunds}
		if fs.Decimals, err = formInt("fee_schedule.decimals", f.FeeDecimals); err != nil {
			return spec, err
		}
		fixed, err := formInt("fee_schedule.fixed_minor", f.FeeFixedMinor)
		if err != nil {
			return spec, err
		}
		fs.FixedMinor = int64(fixed)
		spec.FeeSchedule = fs
	}
	return spec, nil
}

// saveJob creates (original "") or updates a job and records the attempt and its outcome.
func (s *Server) saveJob(ctx context.Context, r *request, original string, spec reconcile.JobSpec) (*reconcile.ReconJob, error) {
	var j *reconcile.ReconJob
	var err error
	action := "reconcile.job.create"
	if original != "" {
		action = "reconcile.job.update"
	}
	// The job's channel account: only an operator of all its tenants points a job at it.
	if err := spec.Validate(); err != nil {
		return nil, err // refused input changes nothing: no audit row
	}
	if err := s.authorize(ctx, r, action, objChannel, spec.Channel); err != nil {
		return nil, err
	}
	if original == "" {
		j, err = s.recon.CreateJob(ctx, spec)
	} else {
		action = "reconcile.job.update"
		j, err = s.recon.UpdateJob(ctx, original, spec)
	}
	if err != nil && statusOf(err) != http.StatusInternalServerError {
		return nil, err // refused input changes nothing: no audit row
	}
	target := original
	if target == "" {
		target = spec.Name
	}
	detail := map[string]any{"name": spec.Name, "channel": spec.Channel, "format": spec.Format, "cron_spec": spec.CronSpec,
		"time_zone": spec.TimeZone, "enabled": spec.Enabled, "operations": spec.Operations, "outcome": "ok"}
	if spec.FeeSchedule != nil {
		detail["fee_schedule"] = spec.FeeSchedule.String()
	}
	if err != nil {
		detail["outcome"] = "error: " + truncate(err.Error(), 200)
	}
	if aerr := s.audit.Append(ctx, nil, Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "recon_job:" + target,
		Tenant: s.channelAuditTenant(ctx, spec.Channel), Detail: detail}); aerr != nil && err == nil {
		return j, aerr
	}
	return j, err
}

// createJobPage is POST /reconcile/jobs (administrators).
func (s *Server) createJobPage(c *gin.Context, r *request) error {
	return s.saveJobPage(c, r, "")
}

// updateJobPage is POST /reconcile/jobs/{name} (administrators).
func (s *Server) updateJobPage(c *gin.Context, r *request) error {
	return s.saveJobPage(c, r, c.Param("name"))
}

func (s *Server) saveJobPage(c *gin.Context, r *request, original string) error {
	form := readJobForm(c)
	form.Original = original
	ctx, cancel := s.ctx(c)
	defer cancel()
	spec, err := jobSpec(form)
	var j *reconcile.ReconJob
	if err == nil {
		j, err = s.saveJob(ctx, r, original, spec)
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		form.Error = publicMessage(err)
		if original == "" {
			v, verr := s.reconView(ctx, r)
			if verr != nil {
				return verr
			}
			v.Form, v.NextRuns = form, nextRuns(form.CronSpec, form.TimeZone)
			s.render(c, http.StatusBadRequest, templates.ReconPage(chrome(r, "reconcile"), v))
			return nil
		}
		v, verr := s.reconJobView(ctx, r, original)
		if verr != nil {
			return verr
		}
		v.Form, v.NextRuns = form, nextRuns(form.CronSpec, form.TimeZone)
		s.render(c, http.StatusBadRequest, templates.ReconJobPage(chrome(r, "reconcile"), v))
		return nil
	}
	notice := "created"
	if original != "" {
		notice = "updated"
	}
	c.Redirect(http.StatusSeeOther, "/reconcile/jobs/"+url.PathEscape(j.Name)+"?notice="+notice)
	return nil
}

func (s *Server) reconJobView(ctx context.Context, r *request, name string) (templates.ReconJobView, error) {
	j, err := s.recon.GetJob(ctx, name)
	if err != nil {
		return templates.ReconJobView{}, err
	}
	v := templates.ReconJobView{Job: jobRow(*j, time.Now()), Form: jobForm(*j), Formats: reconcile.Formats(),
		CanEdit: r.op.Role >= RoleAdmin, CanRun: r.op.Role >= RoleOperator}
	v.NextRuns = nextRuns(j.CronSpec, j.TimeZone)
	runs, err := s.recon.ListRuns(ctx, reconcile.RunFilter{Job: j.Name, Limit: 10})
	if err != nil {
		return v, err
	}
	if runs, err = s.visibleRuns(ctx, r.op, runs); err != nil {
		return v, err
	}
	for _, run := range runs {
		v.Runs = append(v.Runs, runRow(run))
	}
	return v, nil
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

// setJobEnabledPage is POST /reconcile/jobs/{name}/enabled (administrators): enabled=1 or 0.
func (s *Server) setJobEnabledPage(c *gin.Context, r *request) error {
	name := c.Param("name")
	var enabled bool
	switch c.PostForm("enabled") {
	case "1":
		enabled = true
	case "0":
	default:
		return inputErr("enabled", "must be 1 or 0")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.recon.SetJobEnabled(ctx, name, enabled); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, Entry{Actor: r.op.Actor(), IP: r.ip, Action: "reconcile.job.enable",
		Target: "recon_job:" + name, Tenant: s.auditTenantOf(ctx, objReconJob, name), Detail: map[string]any{"enabled": enabled, "outcome": "ok"}}); err != nil {
		return err
	}
	notice := "disabled"
	if enabled {
		notice = "enabled"
	}
	c.Redirect(http.StatusSeeOther, "/reconcile/jobs/"+url.PathEscape(name)+"?notice="+notice)
	return nil
}

// runJobNow asks the daemon to run the job's schedule now (audited with the request).
func (s *Server) runJobNow(ctx context.Context, r *request, name string) error {
	if _, err := s.recon.GetJob(ctx, name); err != nil {
		return err
	}
	return s.jobAction(ctx, r, "run", reconcile.ScheduleName(name))
}

// runJobPage is POST /reconcile/jobs/{name}/run (operators).
func (s *Server) runJobPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	name := c.Param("name")
	if err := s.runJobNow(ctx, r, name); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, "/reconcile/jobs/"+url.PathEscape(name)+"?notice=run")
	return nil
}

// Runs.

func kindCounts(counts map[string]int64, runID int64) []templates.KindCount {
	out := make([]templates.KindCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, templates.KindCount{Kind: k, N: n,
			Href: fmt.Sprintf("/reconcile/findings?run=%d&kind=%s", runID, url.QueryEscape(k))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

func runRow(run reconcile.Run) templates.ReconRunRow {
	row := templates.ReconRunRow{ID: run.ID, Href: fmt.Sprintf("/reconcile/runs/%d", run.ID), Job: strp(run.JobName),
		Channel: run.Channel, BillDate: strp(run.BillDate), Status: string(run.Status), Actor: run.Actor,
		RowsParsed: run.RowsParsed, RowsLoaded: run.RowsLoaded, RowsMatched: run.RowsMatched, Counts: kindCounts(run.Counts, run.ID),
		AlreadyImported: run.AlreadyImported, Error: truncate(strp(run.Error), 300), StartedAt: run.StartedAt,
		FinishedAt: run.FinishedAt, Live: run.Status == reconcile.RunRunning || run.Status == reconcile.RunWaiting}
	if run.StatementID != nil {
		row.Statement = fmt.Sprintf("#%d", *run.StatementID)
		if run.StatementVer != nil {
			row.Statement += fmt.Sprintf(" version %d", *run.StatementVer)
		}
	}
	return row
}

// runView is a run's page: the run and its number of findings.
func runView(run reconcile.Run) templates.ReconRunView {
	v := templates.ReconRunView{Run: runRow(run), FindingsURL: fmt.Sprintf("/reconcile/findings?run=%d", run.ID)}
	for _, n := range run.Counts {
		v.Findings += n
	}
	return v
}

func strp(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// reconRunsPage is GET /reconcile/runs?before=ID.
func (s *Server) reconRunsPage(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	runs, err := s.recon.ListRuns(ctx, reconcile.RunFilter{BeforeID: before, Limit: reconRunsShown + 1})
	if err != nil {
		return err
	}
	v := templates.ReconRunsView{}
	if len(runs) > reconRunsShown {
		runs = runs[:reconRunsShown]
		v.NextURL = fmt.Sprintf("/reconcile/runs?before=%d", runs[len(runs)-1].ID)
	}
	if runs, err = s.visibleRuns(ctx, r.op, runs); err != nil {
		return err
	}
	for _, run := range runs {
		v.Rows = append(v.Rows, runRow(run))
	}
	s.render(c, http.StatusOK, templates.ReconRunsPage(chrome(r, "reconcile"), v))
	return nil
}

// reconRunPage is GET /reconcile/runs/{id}; an htmx request gets the progress partial only.
func (s *Server) reconRunPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.recon.GetRun(ctx, id)
	if err != nil {
		return err
	}
	v := runView(*run)
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.ReconRunProgress(v))
		return nil
	}
	s.render(c, http.StatusOK, templates.ReconRunPage(chrome(r, "reconcile"), v))
	return nil
}

// Statement upload.

type uploadRequest struct {
	Channel, Format, BillDate, Job string
}

// openUpload reads the upload's fields and opens its file; an oversized body is ErrTooLarge.
func (s *Server) openUpload(c *gin.Context) (uploadRequest, multipart.File, error) {
	u := uploadRequest{Channel: strings.TrimSpace(c.PostForm("channel")), Format: strings.TrimSpace(c.PostForm("format")),
		BillDate: strings.TrimSpace(c.PostForm("bill_date")), Job: strings.TrimSpace(c.PostForm("job"))}
	fh, err := c.FormFile(reconStatementFile)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return u, nil, fmt.Errorf("statement: over the %d MiB limit: %w", s.cfg.UploadLimit>>20, ErrTooLarge)
		}
		return u, nil, inputErr(reconStatementFile, "attach the statement file")
	}
	if fh.Size > s.cfg.UploadLimit {
		return u, nil, fmt.Errorf("statement: %d bytes, over the %d MiB limit: %w", fh.Size, s.cfg.UploadLimit>>20, ErrTooLarge)
	}
	f, err := fh.Open()
	if err != nil {
		return u, nil, fmt.Errorf("open upload: %w", err)
	}
	return u, f, nil
}

// reconcileUpload imports and matches an uploaded statement on a new run; the run is returned
// with any error (nil when none was created). The upload is audited with its outcome.
func (s *Server) reconcileUpload(ctx context.Context, r *request, u uploadRequest, src io.Reader) (*reconcile.Run, error) {
	if u.Channel == "" {
		return nil, inputErr("channel", "name the channel the statement is from")
	}
	if u.Format == "" {
		return nil, inputErr("format", "choose the statement's format")
	}
	// Only an operator of every tenant of the channel account imports into it: refused (403,
	// audited) before anything is written.
	if err := s.authorize(ctx, r, "reconcile.statement.upload", objChannel, u.Channel); err != nil {
		return nil, err
	}
	if u.Job != "" {
		if err := s.authorize(ctx, r, "reconcile.statement.upload", objReconJob, u.Job); err != nil {
			return nil, err
		}
	}
	req := reconcile.RunRequest{Import: reconcile.ImportRequest{Channel: u.Channel, Format: u.Format, BillDate: u.BillDate,
		Importer: r.op.Actor()}}
	if u.Job != "" {
		j, err := s.recon.GetJob(ctx, u.Job)
		if err != nil {
			return nil, err
		}
		req.Job = j
	}
	var run *reconcile.Run
	var err error
	if packed, size, ok := sizedReaderAt(src); ok {
		run, err = s.recon.ReconcilePacked(ctx, req, packed, size, nil) // gzip and zip bills too
	} else {
		run, err = s.recon.Reconcile(ctx, req, src, nil)
	}
	detail := map[string]any{"channel": u.Channel, "format": u.Format, "bill_date": u.BillDate, "outcome": "ok"}
	target := "recon_run:"
	if run != nil {
		target += strconv.FormatInt(run.ID, 10)
		detail["rows_loaded"] = run.RowsLoaded
	}
	if err != nil {
		detail["outcome"] = "error: " + truncate(publicMessage(err), 200)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.QueryTimeout)
	defer cancel()
	if aerr := s.audit.Append(actx, nil, Entry{Actor: r.op.Actor(), IP: r.ip, Action: "reconcile.statement.upload",
		Target: target, Tenant: s.channelAuditTenant(actx, u.Channel), Detail: detail}); aerr != nil && err == nil {
		return run, aerr
	}
	return run, err
}

// uploadPage is POST /reconcile/upload (operators): multipart channel, format, bill_date, job
// and the statement file; the run is shown afterwards (with the error that stopped it).
func (s *Server) uploadPage(c *gin.Context, r *request) error {
	u, f, err := s.openUpload(c)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(c.Request.Context(), uploadTimeout)
	defer cancel()
	run, err := s.reconcileUpload(ctx, r, u, f)
	if run == nil {
		if err == nil {
			err = errors.New("reconcile returned no run")
		}
		return err
	}
	v := runView(*run)
	if err != nil {
		v.Error = publicMessage(err)
		s.render(c, statusOf(err), templates.ReconRunPage(chrome(r, "reconcile"), v))
		return nil
	}
	c.Redirect(http.StatusSeeOther, v.Run.Href)
	return nil
}

// Findings.

func parseFindingFilter(q url.Values) (reconcile.FindingFilter, templates.FindingSearch, error) {
	fs := templates.FindingSearch{Kind: q.Get("kind"), State: q.Get("state"), Channel: strings.TrimSpace(q.Get("channel")),
		BillDate: strings.TrimSpace(q.Get("bill_date")), Run: strings.TrimSpace(q.Get("run")), Key: strings.TrimSpace(q.Get("key"))}
	f := reconcile.FindingFilter{Kind: reconcile.Kind(fs.Kind), State: reconcile.FindingState(fs.State), Channel: fs.Channel,
		BillDate: fs.BillDate, Limit: findingsShown}
	if len(fs.Channel) > 64 {
		return f, fs, inputErr("channel", "is longer than 64 characters")
	}
	var err error
	if fs.Run != "" {
		if f.RunID, err = strconv.ParseInt(fs.Run, 10, 64); err != nil || f.RunID <= 0 {
			return f, fs, inputErr("run", "is not a run id")
		}
	}
	if fs.Key != "" {
		if f.KeyID, err = strconv.ParseInt(fs.Key, 10, 64); err != nil || f.KeyID <= 0 {
			return f, fs, inputErr("key", "is not a key id")
		}
	}
	if f.BeforeID, err = parseBefore(q.Get("before")); err != nil {
		return f, fs, err
	}
	if l := q.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > 500 {
			return f, fs, inputErr("limit", "must be between 1 and 500")
		}
	}
	return f, fs, nil
}

func searchQuery(fs templates.FindingSearch) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"kind": fs.Kind, "state": fs.State, "channel": fs.Channel, "bill_date": fs.BillDate, "run": fs.Run,
		"key": fs.Key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// kindHelp says in words what each kind of finding means.
var kindHelp = map[reconcile.Kind]string{
	reconcile.LocalOnly:            "completed here, not on the channel's statement",
	reconcile.ChannelOnly:          "a success on the statement with no completed local key",
	reconcile.StatusMismatch:       "the channel and the key disagree on success",
	reconcile.AmountMismatch:       "both succeeded with different amounts",
	reconcile.CurrencyMismatch:     "both succeeded in different currencies",
	reconcile.DuplicateAtChannel:   "two successful channel transactions for one key: a double charge",
	reconcile.DuplicateInFile:      "one channel transaction on more than one line of the file",
	reconcile.ControlTotalMismatch: "the statement's rows do not add up to its totals; it was rejected",
	reconcile.SettlementMismatch:   "the settled total differs from the net of the rows",
	reconcile.FeeMismatch:          "the line's fee differs from the fee schedule",
}

// findingRow is f for the findings table; names holds the names of the page's keys.
func findingRow(f reconcile.Finding, names map[int64]templates.KeyName) templates.FindingRow {
	row := templates.FindingRow{ID: f.ID, RunID: f.RunID, Channel: f.Channel, BillDate: f.BillDate, Kind: string(f.Kind),
		Subject: f.Subject, Detail: truncate(string(f.Detail), 400), State: string(f.State), Resolver: strp(f.Resolver),
		ReasonCode: strp(f.ReasonCode), Note: truncate(strp(f.Note), 300), CreatedAt: f.CreatedAt,
		CanRecover: f.Recoverable() == nil,
		Money:      findingMoney(f), KindHelp: kindHelp[f.Kind]}
	row.ChannelSide, row.LocalSide, row.Line = findingSides(f)
	if row.Line != 0 {
		row.LineHref = fmt.Sprintf("/reconcile/runs/%d/line?n=%d", f.RunID, row.Line)
	}
	if f.KeyID != nil {
		row.KeyID, row.KeyHref = *f.KeyID, fmt.Sprintf("/keys/%d", *f.KeyID)
		row.Key = names[*f.KeyID]
		row.Key.ID = *f.KeyID
	}
	return row
}

// findingKeyNames names the keys of a page of findings for op.
func (s *Server) findingKeyNames(ctx context.Context, op *Operator, rows []reconcile.Finding) (map[int64]templates.KeyName, error) {
	var ids []int64
	for _, f := range rows {
		if f.KeyID != nil {
			ids = append(ids, *f.KeyID)
		}
	}
	return s.keyNames(ctx, op, ids)
}

// stateTabs are the findings page's tabs: every state with its count under the other filters.
func stateTabs(fs templates.FindingSearch, counts map[reconcile.FindingState]int64) []templates.StateTab {
	var tabs []templates.StateTab
	var all int64
	for _, st := range []reconcile.FindingState{reconcile.FindingOpen, reconcile.FindingResolved, reconcile.FindingIgnored} {
		all += counts[st]
	}
	for _, st := range []string{"open", "resolved", "ignored", ""} {
		q := searchQuery(templates.FindingSearch{Kind: fs.Kind, State: st, Channel: fs.Channel, BillDate: fs.BillDate, Run: fs.Run,
			Key: fs.Key})
		tab := templates.StateTab{State: st, Label: st, N: counts[reconcile.FindingState(st)], Current: fs.State == st,
			Href: "/reconcile/findings?" + q.Encode()}
		if st == "" {
			tab.Label, tab.N = "all", all
		}
		tabs = append(tabs, tab)
	}
	return tabs
}

func kindNames() []string {
	out := make([]string, len(reconcile.Kinds))
	for i, k := range reconcile.Kinds {
		out[i] = string(k)
	}
	return out
}

// findingsPage is GET /reconcile/findings: filters (kind, state, channel, bill_date, run, key
// by id), keyset paging (?before=ID), actions.
func (s *Server) findingsPage(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	f, fs, err := parseFindingFilter(q)
	v := templates.FindingsView{Search: fs, Kinds: kindNames(), CanAct: r.op.Role >= RoleOperator,
		Notice: findingNotices[q.Get("notice")], FirstURL: "/reconcile/findings?" + searchQuery(fs).Encode()}
	if err == nil {
		ctx, cancel := s.ctx(c)
		defer cancel()
		var rows []reconcile.Finding
		var next int64
		rows, next, err = s.listFindings(ctx, r.op, f)
		var names map[int64]templates.KeyName
		if err == nil {
			names, err = s.findingKeyNames(ctx, r.op, rows)
		}
		var counts map[reconcile.FindingState]int64
		if err == nil {
			counts, err = s.findingStateCounts(ctx, r.op, f)
		}
		if err == nil {
			v.Tabs = stateTabs(fs, counts)
			for _, row := range rows {
				v.Rows = append(v.Rows, findingRow(row, names))
			}
			if next != 0 {
				nq := searchQuery(fs)
				nq.Set("before", strconv.FormatInt(next, 10))
				v.NextURL = "/reconcile/findings?" + nq.Encode()
			}
		}
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		v.Error = publicMessage(err)
		s.render(c, http.StatusBadRequest, templates.FindingsPage(chrome(r, "reconcile"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.FindingsPage(chrome(r, "reconcile"), v))
	return nil
}

// findingAction applies one of resolve, ignore and recover to a finding op may see.
func (s *Server) findingAction(ctx context.Context, r *request, action string, id int64, reasonCode, note string) (any, error) {
	if _, err := s.getFinding(ctx, r.op, id); err != nil {
		return nil, err
	}
	switch action {
	case "resolve":
		return s.recon.Resolve(ctx, id, s.reconActor(r), strings.TrimSpace(reasonCode), note)
	case "ignore":
		return s.recon.Ignore(ctx, id, s.reconActor(r), note)
	case "recover":
		return s.recon.Recover(ctx, id, s.reconActor(r), note)
	}
	return nil, fmt.Errorf("finding action %q: %w", action, ErrNotFound)
}

// findingTimeout bounds an action: recover looks the document up downstream.
func (s *Server) findingTimeout() time.Duration { return s.cfg.QueryTimeout + s.cfg.LookupTimeout }

// findingActionPage is POST /reconcile/findings/{id}/{resolve,ignore,recover} (operators); the
// note (ignore: the reason) is the "note" field, the reason code "reason_code".
func (s *Server) findingActionPage(action string) func(c *gin.Context, r *request) error {
	notice := map[string]string{"resolve": "resolved", "ignore": "ignored", "recover": "recovered"}[action]
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.findingTimeout())
		defer cancel()
		if _, err := s.findingAction(ctx, r, action, id, c.PostForm("reason_code"), c.PostForm("note")); err != nil {
			return err
		}
		back := c.PostForm("back")
		if !strings.HasPrefix(back, "/reconcile/findings") || strings.ContainsAny(back, "\r\n") {
			back = "/reconcile/findings"
		}
		u, err := url.Parse(back)
		if err != nil || u.Host != "" || u.Scheme != "" {
			u = &url.URL{Path: "/reconcile/findings"}
		}
		q := u.Query()
		q.Set("notice", notice)
		u.RawQuery = q.Encode()
		c.Redirect(http.StatusSeeOther, u.String())
		return nil
	}
}

// API.

type apiReconJob struct {
	reconcile.ReconJob
	NextRuns []time.Time `json:"next_runs"`
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
		out = append(out, apiReconJob{ReconJob: j, NextRuns: next})
	}
	c.JSON(http.StatusOK, gin.H{"jobs": out})
	return nil
}

// apiCreateReconJob is POST /api/v1/reconcile/jobs (administrators) with a reconcile.JobSpec.
func (s *Server) apiCreateReconJob(c *gin.Context, r *request) error {
	var spec reconcile.JobSpec
	if err := bindJSON(c, &spec); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	j, err := s.saveJob(ctx, r, "", spec)
	if err != nil {
		return err
	}
	next, _ := reconcile.NextRuns(j.CronSpec, j.TimeZone, time.Now(), nextRunsShown)
	c.JSON(http.StatusCreated, apiReconJob{ReconJob: *j, NextRuns: next})
	return nil
}

// apiReconRuns is GET /api/v1/reconcile/runs?job=NAME&before=ID&limit=N.
func (s *Server) apiReconRuns(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	limit := 50
	if l := c.Query("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 500 {
			return inputErr("limit", "must be between 1 and 500")
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	runs, err := s.recon.ListRuns(ctx, reconcile.RunFilter{Job: c.Query("job"), BeforeID: before, Limit: limit})
	if err != nil {
		return err
	}
	out := gin.H{"runs": []reconcile.Run{}, "next_before": nil}
	if len(runs) == limit {
		out["next_before"] = runs[len(runs)-1].ID
	}
	if runs, err = s.visibleRuns(ctx, r.op, runs); err != nil {
		return err
	}
	if len(runs) > 0 {
		out["runs"] = runs
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// apiReconRun is GET /api/v1/reconcile/runs/{id}: progress and counts per kind.
func (s *Server) apiReconRun(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.recon.GetRun(ctx, id)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, run)
	return nil
}

// apiFindings is GET /api/v1/reconcile/findings with the page's filters; next page: ?before=.
func (s *Server) apiFindings(c *gin.Context, r *request) error {
	f, _, err := parseFindingFilter(c.Request.URL.Query())
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, next, err := s.listFindings(ctx, r.op, f)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []reconcile.Finding{}
	}
	out := gin.H{"findings": rows, "next_before": nil}
	if next != 0 {
		out["next_before"] = next
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// apiFindingAction is POST /api/v1/reconcile/findings/{id}/{resolve,ignore,recover} (operators)
// with {"reason_code", "note"} (ignore: "reason" or "note").
func (s *Server) apiFindingAction(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		var b struct {
			ReasonCode string `json:"reason_code"`
			Reason     string `json:"reason"`
			Note       string `json:"note"`
		}
		if err := bindJSON(c, &b); err != nil {
			return err
		}
		if b.Note == "" {
			b.Note = b.Reason
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.findingTimeout())
		defer cancel()
		out, err := s.findingAction(ctx, r, action, id, b.ReasonCode, b.Note)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, out)
		return nil
	}
}

// apiUpload is POST /api/v1/reconcile/statements (operators): the upload form's multipart
// fields; the run is answered (with the error that stopped it, in its status).
func (s *Server) apiUpload(c *gin.Context, r *request) error {
	u, f, err := s.openUpload(c)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(c.Request.Context(), uploadTimeout)
	defer cancel()
	run, err := s.reconcileUpload(ctx, r, u, f)
	if run == nil {
		if err == nil {
			err = errors.New("reconcile returned no run")
		}
		return err
	}
	if err != nil {
		status := statusOf(err)
		if status == http.StatusInternalServerError {
			return err
		}
		c.JSON(status, gin.H{"error": publicMessage(err), "status": status, "run": run})
		return nil
	}
	c.JSON(http.StatusCreated, run)
	return nil
}
