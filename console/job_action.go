package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/daemon"
)

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
			Target: "schedule:" + name, Tenants: s.auditTenantsOf(ctx, access.ObjSchedule, name)})
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
