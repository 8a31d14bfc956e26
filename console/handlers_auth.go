package console

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/templates"
)

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

// login counts the attempt against the throttle, then checks the password; a success starts a new session (a fresh id, so
// a planted cookie cannot be fixed onto the operator).
func (s *Server) login(c *gin.Context, r *request) error {
	cookie, _ := c.Cookie(loginCookie)
	form := c.PostForm("csrf")
	if cookie == "" || subtle.ConstantTimeCompare([]byte(cookie), []byte(form)) != 1 {
		return access.ErrCSRF
	}
	name, password, next := strings.TrimSpace(c.PostForm("name")), c.PostForm("password"), c.PostForm("next")
	ctx, cancel := s.ctx(c)
	defer cancel()
	if s.cfg.DisableLocalLogin {
		if err := s.audit.Append(ctx, nil, audit.Entry{Actor: "anonymous", IP: r.ip, Action: "login.refused",
			Target: "operator:" + truncate(name, 64), Detail: map[string]any{"reason": "password sign-in is turned off"}}); err != nil {
			return err
		}
		s.showLogin(c, http.StatusForbidden, next, "", "Password sign-in is turned off: use single sign-on.")
		return nil
	}
	// The attempt is counted before the password is checked, so parallel attempts past the
	// limit are refused without spending a check (see throttle.attempt).
	started, err := s.throttle.Attempt(ctx, name, r.ip)
	if started {
		s.cfg.Logger.Warn("sign-in locked out", "ip", r.ip)
		if err := s.audit.Append(ctx, nil, audit.Entry{Actor: "anonymous", IP: r.ip, Action: "login.lockout",
			Target: "operator:" + truncate(name, 64)}); err != nil {
			return err
		}
	}
	var te *access.ThrottledError
	if errors.As(err, &te) {
		s.metrics.logins.WithLabelValues("throttled").Inc()
		c.Header("Retry-After", strconv.Itoa(te.RetryAfterSeconds()))
		s.showLogin(c, http.StatusTooManyRequests, next, name, te.Error())
		return nil
	}
	if err != nil {
		return err
	}
	op, err := s.ops.Authenticate(ctx, name, password)
	if errors.Is(err, access.ErrBadCredentials) {
		s.metrics.logins.WithLabelValues("failure").Inc()
		s.showLogin(c, http.StatusUnauthorized, next, name, access.ErrBadCredentials.Error())
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.throttle.Succeed(ctx, op.Name, r.ip); err != nil {
		return err
	}
	id, err := s.sessions.Create(ctx, op, r.ip, c.Request.UserAgent())
	if err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: op.Actor(), IP: r.ip, Action: "login"}); err != nil {
		return err
	}
	s.metrics.logins.WithLabelValues("success").Inc()
	s.setCookie(c, loginCookie, "", -1)
	s.setCookie(c, sessionCookie, id, int(s.cfg.AbsoluteTimeout.Seconds()))
	c.Redirect(http.StatusSeeOther, safeNext(next))
	return nil
}

func (s *Server) logout(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.sessions.Delete(ctx, r.sess); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "logout"}); err != nil {
		return err
	}
	s.setCookie(c, sessionCookie, "", -1)
	c.Redirect(http.StatusSeeOther, "/login")
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

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
	back := "/"
	if ref, err := url.Parse(c.GetHeader("Referer")); err == nil && ref.Host == c.Request.Host {
		back = safeNext(ref.RequestURI())
	}
	c.Redirect(http.StatusSeeOther, back)
	return nil
}
