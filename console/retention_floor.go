package console

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/retention"
	"github.com/idemops/idemops/templates"
)

func floorInput(ff templates.FloorForm) (retention.Floor, error) {
	var f retention.Floor
	var err error
	if f.ClientRetry, err = retention.ParsePeriod(ff.ClientRetry); err != nil {
		return f, inputErr("client_retry", "%s", err.Error())
	}
	if f.Backfill, err = retention.ParsePeriod(ff.Backfill); err != nil {
		return f, inputErr("backfill", "%s", err.Error())
	}
	if f.ReconciliationLag, err = retention.ParsePeriod(ff.ReconciliationLag); err != nil {
		return f, inputErr("reconciliation_lag", "%s", err.Error())
	}
	return f, nil
}

// setFloorPage is POST /retention/floor (administrators).
func (s *Server) setFloorPage(c *gin.Context, r *request) error {
	ff := templates.FloorForm{ClientRetry: c.PostForm("client_retry"), Backfill: c.PostForm("backfill"),
		ReconciliationLag: c.PostForm("reconciliation_lag")}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.authorize(ctx, r, "retention.floor.set", access.ObjPolicy, "floor"); err != nil {
		return err
	}
	f, err := floorInput(ff)
	if err == nil {
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := retention.SetFloor(ctx, tx, f, r.op.Actor()); err != nil {
				return err
			}
			return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Tenants: []string{access.AllTenants}, Action: "retention.floor.set", Target: "floor",
				Detail: map[string]any{"client_retry": retention.FormatPeriod(f.ClientRetry), "backfill": retention.FormatPeriod(f.Backfill),
					"reconciliation_lag": retention.FormatPeriod(f.ReconciliationLag)}})
		})
		if err == nil {
			err = s.inOtherCells(ctx, func(ctx context.Context, c *cell) error { // each cell's purge keeps its own floor
				return c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return retention.SetFloor(ctx, tx, f, r.op.Actor()) })
			})
		}
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		ff.Error = pageMessage(c.Request.Context(), err)
		return s.retentionAgain(ctx, c, r, http.StatusBadRequest, func(v *templates.RetentionView) { v.FloorForm = ff })
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=floor")
	return nil
}
