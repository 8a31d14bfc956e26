package console

import (
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

// backTo is the page a settings form was posted from: its "next" field (the header's forms
// carry the page's own address, Chrome.Here — the console sends no Referer), else a same-site
// Referer, else the dashboard.
func backTo(c *gin.Context) string {
	if next := c.PostForm("next"); next != "" {
		return safeNext(next)
	}
	if ref, err := url.Parse(c.GetHeader("Referer")); err == nil && ref.Host == c.Request.Host {
		return safeNext(ref.RequestURI())
	}
	return "/"
}
