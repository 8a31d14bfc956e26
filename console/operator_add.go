package console

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/errs"
)

func (s *Server) addOperator(c *gin.Context, r *request) error {
	role, err := access.ParseRole(c.PostForm("role"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	tenants, err := access.ParseTenants(c.PostForm("tenants"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	if err := grantable(r.op, tenants); err != nil {
		s.refuse(c, r, "operator.add", "operator:"+strings.TrimSpace(c.PostForm("name")), err)
		return s.adminError(c, r, err)
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	_, err = s.ops.Add(ctx, s.change(r), access.NewOperator{Name: strings.TrimSpace(c.PostForm("name")),
		Password: c.PostForm("password"), Role: role, Tenants: tenants})
	if err != nil {
		return s.adminError(c, r, err)
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice=added")
	return nil
}

// grantable checks that an admin grants only tenants they may see themselves.
func grantable(admin *access.Operator, tenants []string) error {
	for _, t := range tenants {
		if !admin.MaySee(t) {
			return errs.Refused(errs.Forbidden, errs.Phrasef("you may not grant tenant %q: it is not one of yours", t))
		}
	}
	return nil
}
