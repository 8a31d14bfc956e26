package console

import (
	"crypto/subtle"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/templates"
)

// langCookie remembers the language chosen on the sign-in page (and mirrors the saved
// preference), so pages without an operator speak it too.
const langCookie = "idemops_lang"

// requestLanguage is the language of a page for a caller not (yet) known: the idemops_lang
// cookie, else the browser's Accept-Language, else English.
func requestLanguage(c *gin.Context) string {
	if v, err := c.Cookie(langCookie); err == nil {
		if code, ok := templates.ParseLang(v); ok {
			return code
		}
	}
	return templates.MatchAcceptLanguage(c.GetHeader("Accept-Language"))
}

// language puts the request's language into its context for every page, error pages of unknown
// routes included; enforce replaces it with the operator's saved preference once authenticated.
func (s *Server) language(c *gin.Context) {
	c.Request = c.Request.WithContext(templates.WithLang(c.Request.Context(), requestLanguage(c)))
	c.Next()
}

// operatorLanguage applies an authenticated operator's saved preference, if any.
func operatorLanguage(c *gin.Context, op *access.Operator) {
	if code, ok := templates.ParseLang(op.Language); ok {
		c.Request = c.Request.WithContext(templates.WithLang(c.Request.Context(), code))
	}
}

// backTo is the same-site page a settings form was posted from ("/" otherwise).
func backTo(c *gin.Context) string {
	if ref, err := url.Parse(c.GetHeader("Referer")); err == nil && ref.Host == c.Request.Host {
		return safeNext(ref.RequestURI())
	}
	return "/"
}

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
