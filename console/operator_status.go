package console

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

func (s *Server) setStatus(c *gin.Context, r *request) error {
	o, err := s.target(c, r, "operator.status")
	if err != nil {
		return err
	}
	disabled := c.PostForm("disabled") == "true"
	if disabled && o.ID == r.op.ID {
		err := refused("you cannot disable yourself (ask another admin)")
		s.refuse(c, r, "operator.disable", "operator:"+o.Name, err)
		return s.adminError(c, r, err)
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetDisabled(ctx, s.change(r), o.Name, disabled); err != nil {
		if refusable(err) {
			s.auditRefusal(ctx, r, "operator.disable", "operator:"+o.Name, err)
		}
		return s.adminError(c, r, err)
	}
	notice := "enabled"
	if disabled {
		notice = "disabled"
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice="+notice)
	return nil
}
