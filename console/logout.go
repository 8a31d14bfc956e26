package console

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/audit"
)

func (s *Server) logout(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.sessions.Delete(ctx, r.sess); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "logout", Tenants: r.op.Tenants}); err != nil {
		return err
	}
	s.setCookie(c, sessionCookie, "", -1)
	c.Redirect(http.StatusSeeOther, "/login")
	return nil
}
