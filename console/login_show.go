package console

import (
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/templates"
)

// loginForm shows the sign-in form with a fresh pre-session CSRF token (double-submit: the
// cookie and the form field must match).
func (s *Server) loginForm(c *gin.Context, _ *request) error {
	if cookie, err := c.Cookie(sessionCookie); err == nil {
		ctx, cancel := s.ctx(c)
		defer cancel()
		if _, err := s.sessions.Load(ctx, cookie); err == nil {
			c.Redirect(http.StatusSeeOther, safeNext(c.Query("next")))
			return nil
		}
	}
	s.showLogin(c, http.StatusOK, c.Query("next"), "", "")
	return nil
}

func (s *Server) showLogin(c *gin.Context, status int, next, name, msg string) {
	token := access.RandomSecret(24)
	s.setCookie(c, loginCookie, token, 3600)
	s.render(c, status, templates.LoginPage(templates.LoginView{Name: name, CSRF: token, Next: safeNext(next), Error: msg,
		SSO: s.sso != nil, PasswordOff: s.cfg.DisableLocalLogin}))
}

func (s *Server) setCookie(c *gin.Context, name, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.cfg.SecureCookies || c.Request.TLS != nil,
	})
}

// safeNext keeps a post-sign-in redirect on this site: a local absolute path only. Browsers drop
// tabs and newlines and read a backslash as a slash, so "/\t/evil" and "/\\evil" are "//evil" to
// them: any control character or backslash, invalid UTF-8, or anything that parses with a scheme
// or host sends the operator to "/" instead.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || len(next) > 2048 ||
		!utf8.ValidString(next) || strings.ContainsRune(next, '\\') {
		return "/"
	}
	for _, r := range next {
		if r < 0x20 || r == 0x7f || unicode.IsControl(r) {
			return "/"
		}
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}
