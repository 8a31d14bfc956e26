package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
)

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
			Target: "operator:" + truncate(name, 64), Tenants: s.signInTenants(ctx, name), Detail: map[string]any{"reason": "password sign-in is turned off"}}); err != nil {
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
			Target: "operator:" + truncate(name, 64), Tenants: s.signInTenants(ctx, name)}); err != nil {
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
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: op.Actor(), IP: r.ip, Action: "login", Tenants: op.Tenants}); err != nil {
		return err
	}
	s.metrics.logins.WithLabelValues("success").Inc()
	s.setCookie(c, loginCookie, "", -1)
	s.setCookie(c, sessionCookie, id, int(s.cfg.AbsoluteTimeout.Seconds()))
	c.Redirect(http.StatusSeeOther, safeNext(next))
	return nil
}

// signInTenants are the tenants of a sign-in attempt's audit row: the named operator's, so that
// their administrators read the attempts on their accounts; "*" when no operator has the name.
func (s *Server) signInTenants(ctx context.Context, name string) []string {
	if op, err := s.ops.ByName(ctx, name); err == nil {
		return op.Tenants
	}
	return []string{access.AllTenants}
}
