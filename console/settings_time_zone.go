package console

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/templates"
)

// setTimeZone stores the zone the operator sees times in ("UTC" or an IANA name such as
// Asia/Shanghai) and goes back to the page the form was on.
func (s *Server) setTimeZone(c *gin.Context, r *request) error {
	zone := strings.TrimSpace(c.PostForm("time_zone"))
	if _, err := templates.LoadZone(zone); err != nil {
		return inputErr("time_zone", "%q is not an IANA time zone (e.g. UTC, Asia/Shanghai)", truncate(zone, 64))
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetTimeZone(ctx, s.change(r), r.op.ID, zone); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, backTo(c))
	return nil
}
