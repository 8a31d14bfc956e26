package console

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/templates"
)

// setLanguage saves the operator's console language from the header switch (audited as
// operator.language), mirrors it in the cookie for the sign-in page, and goes back.
func (s *Server) setLanguage(c *gin.Context, r *request) error {
	code, ok := templates.ParseLang(c.PostForm("lang"))
	if !ok {
		return inputErr("lang", "%q is not a console language (en, zh-CN)", truncate(c.PostForm("lang"), 32))
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetLanguage(ctx, s.change(r), r.op.ID, code); err != nil {
		return err
	}
	s.setCookie(c, langCookie, code, 365*24*3600)
	c.Redirect(http.StatusSeeOther, backTo(c))
	return nil
}
