package console

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/reconcile"
)

// A recon job's switches: enable or disable it, run it now.

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
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "reconcile.job.enable",
		Target: "recon_job:" + name, Tenants: s.auditTenantsOf(ctx, access.ObjReconJob, name), Detail: map[string]any{"enabled": enabled, "outcome": "ok"}}); err != nil {
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
	return s.jobAction(ctx, r, "run", "", reconcile.ScheduleName(name)) // a recon job is the control cell's
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
