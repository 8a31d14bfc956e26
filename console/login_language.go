package console

import (
	"crypto/subtle"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/templates"
)

// loginLanguage is the sign-in page's switch: no operator yet, so only the cookie (the form
// carries the sign-in page's pre-session CSRF token, checked like the sign-in form's).
func (s *Server) loginLanguage(c *gin.Context, _ *request) error {
	cookie, _ := c.Cookie(loginCookie)
	if cookie == "" || subtle.ConstantTimeCompare([]byte(cookie), []byte(c.PostForm("csrf"))) != 1 {
		return access.ErrCSRF
	}
	code, ok := templates.ParseLang(c.PostForm("lang"))
	if !ok {
		return inputErr("lang", "%q is not a console language (en, zh-CN)", truncate(c.PostForm("lang"), 32))
	}
	s.setCookie(c, langCookie, code, 365*24*3600)
	c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(safeNext(c.PostForm("next"))))
	return nil
}
