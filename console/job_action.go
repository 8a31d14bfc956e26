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

// jobAction runs one of the daemon's schedule switches on schedule name of the cell called
// cellName (scheduleCell) with its audit row, in one transaction in that cell; another cell's
// audit row goes to the control database's chain (cell.audit) and names the cell.
func (s *Server) jobAction(ctx context.Context, r *request, action, cellName, name string) error {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 128 {
		return inputErr("name", "name the schedule (1–128 characters)")
	}
	// The schedule's scope: a recon job's is its channel account's, the others' every tenant's
	// (resolved by name in the control database, which holds the recon jobs, whatever the cell).
	if err := s.authorize(ctx, r, "job."+action, access.ObjSchedule, name); err != nil {
		return err
	}
	c, err := s.scheduleCell(cellName)
	if err != nil {
		return err
	}
	apply := map[string]func(context.Context, *gorm.DB, string) error{
		"run": daemon.RunNow, "pause": daemon.Pause, "resume": daemon.Resume}[action]
	entry := audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "job." + action,
		Target: "schedule:" + name, Tenants: s.auditTenantsOf(ctx, access.ObjSchedule, name)}
	if s.cells.cells != nil {
		entry.Detail = map[string]any{"cell": c.name}
	}
	return c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := apply(ctx, tx, name); err != nil {
			if errors.Is(err, daemon.ErrUnknownSchedule) {
				return fmt.Errorf("schedule %q: %w", truncate(name, 40), ErrNotFound)
			}
			return err
		}
		return c.audit.Append(ctx, tx, entry)
	})
}

// scheduleCell is the cell whose daemon runs a schedule of the cell called name: every cell's
// daemon has its own schedules (often of the same names). No name: the control cell's, as before
// cells (with one database, the one). Errors: ErrNotFound for a cell not in the map.
func (s *Server) scheduleCell(name string) (*cell, error) {
	if len(name) > 128 {
		return nil, inputErr("cell", "longer than 128 characters")
	}
	for _, c := range s.cells.everywhere() {
		if name == c.name || name == "" && c.db == s.db {
			return c.cell, nil
		}
	}
	return nil, fmt.Errorf("cell %q: %w", truncate(name, 40), ErrNotFound)
}

func (s *Server) jobActionPage(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		ctx, cancel := s.ctx(c)
		defer cancel()
		if err := s.jobAction(ctx, r, action, c.PostForm("cell"), c.PostForm("name")); err != nil {
			return err
		}
		c.Redirect(http.StatusSeeOther, "/jobs?notice="+url.QueryEscape(action))
		return nil
	}
}

// apiJobAction is POST /api/v1/jobs/{run,pause,resume} {"name": schedule, "cell": its cell
// (across cells; none: the control cell's)}.
func (s *Server) apiJobAction(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		var b struct {
			Name string `json:"name"`
			Cell string `json:"cell"`
		}
		if err := bindJSON(c, &b); err != nil {
			return err
		}
		ctx, cancel := s.ctx(c)
		defer cancel()
		if err := s.jobAction(ctx, r, action, b.Cell, b.Name); err != nil {
			return err
		}
		c.JSON(http.StatusAccepted, gin.H{"schedule": b.Name, "action": action})
		return nil
	}
}
