package console

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/retention"
)

func (s *Server) deletePolicy(ctx context.Context, r *request, operation string, state claim.State) error {
	if err := s.authorize(ctx, r, "retention.policy.delete", access.ObjPolicy, operation+"/"+string(state)); err != nil {
		return err
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := retention.DeletePolicy(ctx, tx, operation, state, r.op.Actor()); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Tenants: []string{access.AllTenants}, Action: "retention.policy.delete",
			Target: "policy:" + operation + "/" + string(state)})
	})
	if err != nil {
		return err
	}
	return s.inOtherCells(ctx, func(ctx context.Context, c *cell) error {
		err := c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return retention.DeletePolicy(ctx, tx, operation, state, r.op.Actor()) })
		if errs.KindOf(err) == errs.NotFound {
			return nil // not in this cell: deleted already
		}
		return err
	})
}

// deletePolicyPage is POST /retention/policies/delete (administrators).
func (s *Server) deletePolicyPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.deletePolicy(ctx, r, c.PostForm("operation"), claim.State(c.PostForm("state"))); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=deleted")
	return nil
}
