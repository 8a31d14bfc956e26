package console

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
)

func (s *Server) setAccess(c *gin.Context, r *request) error {
	o, err := s.target(c, r, "operator.set_access")
	if err != nil {
		return err
	}
	role, err := access.ParseRole(c.PostForm("role"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	tenants, err := access.ParseTenants(c.PostForm("tenants"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	if err := grantable(r.op, tenants); err != nil {
		s.refuse(c, r, "operator.set_access", "operator:"+o.Name, err)
		return s.adminError(c, r, err)
	}
	if o.ID == r.op.ID && role < access.RoleAdmin {
		return s.adminError(c, r, inputErr("role", "you cannot lower your own role (ask another admin)"))
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetAccess(ctx, s.change(r), o.Name, role, tenants); err != nil {
		if refusable(err) {
			s.auditRefusal(ctx, r, "operator.set_access", "operator:"+o.Name, err)
		}
		return s.adminError(c, r, err)
	}
	if o.ID == r.op.ID { // our own session ended with the change
		c.Redirect(http.StatusSeeOther, "/login")
		return nil
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice=access")
	return nil
}
