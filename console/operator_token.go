package console

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/templates"
)

// createToken makes an API token for an operator and shows it once, in the response to the
// POST (never in a URL).
func (s *Server) createToken(c *gin.Context, r *request) error {
	o, err := s.target(c, r, "token.create")
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	secret, err := s.ops.CreateToken(ctx, s.change(r), o.Name, c.PostForm("label"), 0)
	if err != nil {
		return s.adminError(c, r, err)
	}
	v, err := s.operatorsView(c, r)
	if err != nil {
		return err
	}
	v.NewToken = secret
	v.Notice = say(c.Request.Context(), "Token created for %s.", o.Name)
	s.render(c, http.StatusOK, templates.OperatorsPage(chrome(r, "operators"), v))
	return nil
}
