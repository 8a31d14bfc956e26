package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Creating and editing a recon job: the page form and the API body decode differently; saveJob
// is the one action.

func readJobForm(c *gin.Context) templates.ReconJobForm {
	return templates.ReconJobForm{Name: c.PostForm("name"), Channel: c.PostForm("channel"), Format: c.PostForm("format"),
		Source: c.PostForm("source"), Bill: strings.TrimSpace(c.PostForm("bill")), Operations: c.PostForm("operations"), CronSpec: c.PostForm("cron_spec"),
		TimeZone: c.PostForm("time_zone"), BillDateOffsetDays: c.PostForm("bill_date_offset_days"),
		GraceSeconds: c.PostForm("grace_seconds"), Deadline: c.PostForm("ready_deadline_seconds"),
		Enabled: c.PostForm("enabled") == "1", FeeRateBP: strings.TrimSpace(c.PostForm("fee_rate_bp")),
		FeeFixedMinor: c.PostForm("fee_fixed_minor"), FeeRounding: c.PostForm("fee_rounding"),
		FeeDecimals: c.PostForm("fee_decimals"), FeeRefunds: c.PostForm("fee_refunds")}
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

func jobSpec(f templates.ReconJobForm) (reconcile.JobSpec, error) {
	spec := reconcile.JobSpec{Name: f.Name, Channel: f.Channel, Format: f.Format, Source: f.Source, Bill: f.Bill,
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
	if err := s.authorize(ctx, r, action, access.ObjChannel, spec.Channel); err != nil {
		return nil, err
	}
	if original != "" {
		// The edit form shows an operator who is not a * administrator the source without its
		// query: sent back unchanged, it means the saved source.
		if old, err := s.recon.GetJob(ctx, original); err == nil && spec.Source != old.Source &&
			spec.Source == reconcile.RedactSource(old.Source) {
			spec.Source = old.Source
		}
	}
	if spec.Source != "" && !strings.HasPrefix(spec.Source, "http://") && !strings.HasPrefix(spec.Source, "https://") &&
		!r.op.SeesAllTenants() {
		// A file on the daemon's machine: only administrators of every tenant name one.
		err := errs.Refused(errs.Forbidden, errs.Phrasef("source: only administrators of every tenant (*) may name a local file"))
		s.auditRefusal(ctx, r, action, "recon_job:"+spec.Name, err)
		return nil, err
	}
	if original == "" {
		j, err = s.recon.CreateJob(ctx, spec)
	} else {
		action = "reconcile.job.update"
		j, err = s.recon.UpdateJob(ctx, original, spec)
	}
	if errors.Is(err, reconcile.ErrNameTaken) && s.scope.Check(ctx, r.op, access.ObjReconJob, spec.Name, false) != nil {
		// The job of that name is not this operator's to see: the answer says no more than that
		// the name cannot be used (names are unique across tenants).
		err = inputErr("name", "this name cannot be used: choose another")
	}
	if err != nil && statusOf(err) != http.StatusInternalServerError {
		return nil, err // refused input changes nothing: no audit row
	}
	target := original
	if target == "" {
		target = spec.Name
	}
	detail := map[string]any{"name": spec.Name, "channel": spec.Channel, "format": spec.Format, "source": reconcile.RedactSource(spec.Source),
		"bill": spec.Bill, "cron_spec": spec.CronSpec,
		"time_zone": spec.TimeZone, "enabled": spec.Enabled, "operations": spec.Operations, "outcome": "ok"}
	if spec.FeeSchedule != nil {
		detail["fee_schedule"] = spec.FeeSchedule.String()
	}
	if err != nil {
		detail["outcome"] = "error: " + truncate(err.Error(), 200)
	}
	if aerr := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "recon_job:" + target,
		Tenants: s.channelAuditTenants(ctx, spec.Channel), Detail: detail}); aerr != nil && err == nil {
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
		form.Error = pageMessage(c.Request.Context(), err)
		if original == "" {
			v, verr := s.reconView(ctx, r)
			if verr != nil {
				return verr
			}
			v.Form, v.NextRuns = form, nextRuns(c.Request.Context(), form.CronSpec, form.TimeZone)
			s.render(c, http.StatusBadRequest, templates.ReconPage(chrome(r, "reconcile"), v))
			return nil
		}
		v, verr := s.reconJobView(ctx, r, original)
		if verr != nil {
			return verr
		}
		v.Form, v.NextRuns = form, nextRuns(c.Request.Context(), form.CronSpec, form.TimeZone)
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
	j.Source = shownSource(r.op, j.Source)
	c.JSON(http.StatusCreated, apiReconJob{ReconJob: *j, NextRuns: next})
	return nil
}
