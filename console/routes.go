package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// routeKind says how a route authenticates and answers errors.
type routeKind int

const (
	kindPage  routeKind = iota // session cookie; HTML; POSTs need the CSRF token
	kindAPI                    // bearer token; JSON
	kindProbe                  // public, plain
)

// route is one entry of the route table: the single place that says who may call what.
type route struct {
	Method string
	Path   string
	// Min is the lowest role allowed; RoleNone marks a public route.
	Min    access.Role
	Kind   routeKind
	Handle func(c *gin.Context, r *request) error
}

// request is what the enforcement point learned about the caller.
type request struct {
	op   *access.Operator
	sess *access.Session // nil on the API
	ip   string
	// here is the page's address for a GET ("" otherwise): the header's language and zone
	// switches come back to it.
	here string
}

// routes is the route table. enforce applies it; TestRoleRouteMatrix checks all of it.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/healthz", access.RoleNone, kindProbe, s.healthz},
		{"GET", "/readyz", access.RoleNone, kindProbe, s.readyz},
		{"GET", "/metrics", access.RoleNone, kindProbe, s.metricsPage},
		{"GET", "/static/*file", access.RoleNone, kindProbe, s.static},
		{"GET", "/login", access.RoleNone, kindPage, s.loginForm},
		{"POST", "/login", access.RoleNone, kindPage, s.login},
		{"GET", "/login/sso", access.RoleNone, kindPage, s.ssoStart},
		{"GET", "/login/sso/callback", access.RoleNone, kindPage, s.ssoCallback},
		{"POST", "/logout", access.RoleViewer, kindPage, s.logout},
		{"POST", "/settings/time-zone", access.RoleViewer, kindPage, s.setTimeZone},
		{"POST", "/settings/language", access.RoleViewer, kindPage, s.setLanguage},
		{"POST", "/login/language", access.RoleNone, kindPage, s.loginLanguage},
		{"GET", "/", access.RoleViewer, kindPage, s.dashboard},
		{"GET", "/keys", access.RoleViewer, kindPage, s.keys},
		{"POST", "/keys/find", access.RoleViewer, kindPage, s.findKey},
		{"GET", "/keys/:id", access.RoleViewer, kindPage, s.key},
		{"POST", "/keys/:id/reveal", access.RoleOperator, kindPage, s.reveal},
		{"POST", "/keys/:id/check", access.RoleOperator, kindPage, s.checkDownstream},
		{"GET", "/keys/:id/replay", access.RoleOperator, kindPage, s.replayPreview},
		{"POST", "/keys/:id/replay", access.RoleOperator, kindPage, s.confirmReplay},
		{"POST", "/keys/:id/final", access.RoleAdmin, kindPage, s.markFinalPage},
		{"POST", "/keys/:id/release", access.RoleAdmin, kindPage, s.releasePage},
		{"GET", "/replays", access.RoleOperator, kindPage, s.replaysPage},
		{"GET", "/replays/:id", access.RoleOperator, kindPage, s.replayPage},
		{"POST", "/replays/:id/approve", access.RoleOperator, kindPage, s.approveReplayPage},
		{"POST", "/replays/bulk", access.RoleOperator, kindPage, s.bulkPreviewPage},
		{"GET", "/replays/bulk/:id", access.RoleOperator, kindPage, s.bulkPage},
		{"GET", "/replays/bulk/:id/progress", access.RoleOperator, kindPage, s.bulkProgress},
		{"POST", "/replays/bulk/start", access.RoleOperator, kindPage, s.bulkStartPage},
		{"GET", "/consumers", access.RoleViewer, kindPage, s.consumersPage},
		{"GET", "/jobs", access.RoleViewer, kindPage, s.jobsPage},
		{"GET", "/jobs/runs", access.RoleViewer, kindPage, s.jobRunsPartial},
		{"GET", "/jobs/runs/:id", access.RoleViewer, kindPage, s.jobRunPage},
		{"GET", "/reconcile/runs/:id/line", access.RoleViewer, kindPage, s.reconLinePage},
		{"POST", "/jobs/run", access.RoleOperator, kindPage, s.jobActionPage("run")},
		{"POST", "/jobs/pause", access.RoleAdmin, kindPage, s.jobActionPage("pause")},
		{"POST", "/jobs/resume", access.RoleAdmin, kindPage, s.jobActionPage("resume")},
		{"POST", "/keys/:id/hold", access.RoleAdmin, kindPage, s.holdPage},
		{"GET", "/retention", access.RoleViewer, kindPage, s.retentionPage},
		{"GET", "/retention/preview", access.RoleViewer, kindPage, s.retentionPreview},
		{"POST", "/retention/policies", access.RoleAdmin, kindPage, s.savePolicyPage},
		{"POST", "/retention/policies/delete", access.RoleAdmin, kindPage, s.deletePolicyPage},
		{"POST", "/retention/floor", access.RoleAdmin, kindPage, s.setFloorPage},
		{"GET", "/reconcile", access.RoleViewer, kindPage, s.reconPage},
		{"GET", "/reconcile/next-runs", access.RoleViewer, kindPage, s.reconNextRuns},
		{"POST", "/reconcile/jobs", access.RoleAdmin, kindPage, s.createJobPage},
		{"GET", "/reconcile/jobs/:name", access.RoleViewer, kindPage, s.reconJobPage},
		{"POST", "/reconcile/jobs/:name", access.RoleAdmin, kindPage, s.updateJobPage},
		{"POST", "/reconcile/jobs/:name/enabled", access.RoleAdmin, kindPage, s.setJobEnabledPage},
		{"POST", "/reconcile/jobs/:name/run", access.RoleOperator, kindPage, s.runJobPage},
		{"POST", "/reconcile/upload", access.RoleOperator, kindPage, s.uploadPage},
		{"POST", "/reconcile/channels", access.RoleAdmin, kindPage, s.setChannelPage},
		{"POST", "/reconcile/channels/:name", access.RoleAdmin, kindPage, s.setChannelPage},
		{"POST", "/reconcile/channels/:name/settings", access.RoleAdmin, kindPage, s.setChannelSettingsPage},
		{"POST", "/reconcile/channels/:name/credentials", access.RoleAdmin, kindPage, s.setChannelCredentialPage},
		{"GET", "/reconcile/runs", access.RoleViewer, kindPage, s.reconRunsPage},
		{"GET", "/reconcile/runs/:id", access.RoleViewer, kindPage, s.reconRunPage},
		{"GET", "/reconcile/findings", access.RoleViewer, kindPage, s.findingsPage},
		{"GET", "/reconcile/findings/export", access.RoleViewer, kindPage, s.findingsExport},
		{"POST", "/reconcile/findings/:id/resolve", access.RoleOperator, kindPage, s.findingActionPage("resolve")},
		{"POST", "/reconcile/findings/:id/ignore", access.RoleOperator, kindPage, s.findingActionPage("ignore")},
		{"POST", "/reconcile/findings/:id/recover", access.RoleOperator, kindPage, s.findingActionPage("recover")},
		{"POST", "/reconcile/findings/:id/reopen", access.RoleOperator, kindPage, s.findingActionPage("reopen")},
		{"GET", "/reconcile/findings/bulk", access.RoleOperator, kindPage, s.findingsBulkRunsPage},
		{"POST", "/reconcile/findings/bulk", access.RoleOperator, kindPage, s.findingsBulkPreviewPage},
		{"POST", "/reconcile/findings/bulk/start", access.RoleOperator, kindPage, s.findingsBulkStartPage},
		{"GET", "/reconcile/findings/bulk/:id", access.RoleOperator, kindPage, s.findingsBulkRunPage},
		{"POST", "/reconcile/findings/bulk/:id/approve", access.RoleOperator, kindPage, s.findingsBulkDecidePage(true)},
		{"POST", "/reconcile/findings/bulk/:id/reject", access.RoleOperator, kindPage, s.findingsBulkDecidePage(false)},
		{"GET", "/audit", access.RoleAdmin, kindPage, s.auditPage},
		{"GET", "/admin/operators", access.RoleAdmin, kindPage, s.operatorsPage},
		{"POST", "/admin/operators", access.RoleAdmin, kindPage, s.addOperator},
		{"POST", "/admin/operators/:id/access", access.RoleAdmin, kindPage, s.setAccess},
		{"POST", "/admin/operators/:id/status", access.RoleAdmin, kindPage, s.setStatus},
		{"POST", "/admin/operators/:id/tokens", access.RoleAdmin, kindPage, s.createToken},
		{"GET", "/api/v1/keys", access.RoleViewer, kindAPI, s.apiKeys},
		{"GET", "/api/v1/keys/:id", access.RoleViewer, kindAPI, s.apiKey},
		{"POST", "/api/v1/keys/find", access.RoleViewer, kindAPI, s.apiFindKey},
		{"GET", "/api/v1/keys/:id/replay", access.RoleOperator, kindAPI, s.apiReplayPreview},
		{"POST", "/api/v1/keys/:id/replay", access.RoleOperator, kindAPI, s.apiReplayConfirm},
		{"GET", "/api/v1/keys/:id/final", access.RoleAdmin, kindAPI, s.apiFinalToken},
		{"POST", "/api/v1/keys/:id/final", access.RoleAdmin, kindAPI, s.apiMarkFinal},
		{"POST", "/api/v1/keys/:id/release", access.RoleAdmin, kindAPI, s.apiRelease},
		{"GET", "/api/v1/replays/:id", access.RoleOperator, kindAPI, s.apiReplay},
		{"POST", "/api/v1/replays/:id/approve", access.RoleOperator, kindAPI, s.apiReplayApprove},
		{"POST", "/api/v1/replays/bulk", access.RoleOperator, kindAPI, s.apiBulkPreview},
		{"GET", "/api/v1/replays/bulk/:id", access.RoleOperator, kindAPI, s.apiBulk},
		{"POST", "/api/v1/replays/bulk/start", access.RoleOperator, kindAPI, s.apiBulkStart},
		{"GET", "/api/v1/jobs", access.RoleViewer, kindAPI, s.apiJobs},
		{"GET", "/api/v1/jobs/runs/:id", access.RoleViewer, kindAPI, s.apiJobRun},
		{"POST", "/api/v1/jobs/run", access.RoleOperator, kindAPI, s.apiJobAction("run")},
		{"POST", "/api/v1/jobs/pause", access.RoleAdmin, kindAPI, s.apiJobAction("pause")},
		{"POST", "/api/v1/jobs/resume", access.RoleAdmin, kindAPI, s.apiJobAction("resume")},
		{"GET", "/api/v1/retention/policies", access.RoleViewer, kindAPI, s.apiPolicies},
		{"POST", "/api/v1/retention/policies", access.RoleAdmin, kindAPI, s.apiSavePolicy},
		{"GET", "/api/v1/retention/preview", access.RoleViewer, kindAPI, s.apiPreview},
		{"GET", "/api/v1/retention/purges", access.RoleViewer, kindAPI, s.apiPurges},
		{"GET", "/api/v1/reconcile/jobs", access.RoleViewer, kindAPI, s.apiReconJobs},
		{"POST", "/api/v1/reconcile/jobs", access.RoleAdmin, kindAPI, s.apiCreateReconJob},
		{"GET", "/api/v1/reconcile/runs", access.RoleViewer, kindAPI, s.apiReconRuns},
		{"GET", "/api/v1/reconcile/runs/:id", access.RoleViewer, kindAPI, s.apiReconRun},
		{"GET", "/api/v1/dashboard", access.RoleViewer, kindAPI, s.apiDashboard},
		{"GET", "/api/v1/reconcile/findings", access.RoleViewer, kindAPI, s.apiFindings},
		{"GET", "/api/v1/reconcile/findings/export", access.RoleViewer, kindAPI, s.apiFindingsExport},
		{"POST", "/api/v1/reconcile/findings/:id/resolve", access.RoleOperator, kindAPI, s.apiFindingAction("resolve")},
		{"POST", "/api/v1/reconcile/findings/:id/ignore", access.RoleOperator, kindAPI, s.apiFindingAction("ignore")},
		{"POST", "/api/v1/reconcile/findings/:id/recover", access.RoleOperator, kindAPI, s.apiFindingAction("recover")},
		{"POST", "/api/v1/reconcile/findings/:id/reopen", access.RoleOperator, kindAPI, s.apiFindingAction("reopen")},
		{"POST", "/api/v1/reconcile/findings/bulk", access.RoleOperator, kindAPI, s.apiFindingsBulk},
		{"GET", "/api/v1/reconcile/findings/bulk/:id", access.RoleOperator, kindAPI, s.apiFindingsBulkRun},
		{"POST", "/api/v1/reconcile/findings/bulk/:id/approve", access.RoleOperator, kindAPI, s.apiFindingsBulkDecide(true)},
		{"POST", "/api/v1/reconcile/findings/bulk/:id/reject", access.RoleOperator, kindAPI, s.apiFindingsBulkDecide(false)},
		{"POST", "/api/v1/reconcile/statements", access.RoleOperator, kindAPI, s.apiUpload},
		{"GET", "/api/v1/reconcile/channels/:name", access.RoleViewer, kindAPI, s.apiChannelAccount},
		{"POST", "/api/v1/reconcile/channels/:name/settings", access.RoleAdmin, kindAPI, s.apiSetChannelSettings},
		{"POST", "/api/v1/reconcile/channels/:name/credentials/:credential", access.RoleAdmin, kindAPI, s.apiSetChannelCredential},
		{"POST", "/api/v1/reconcile/channels/:name/credentials/:credential/delete", access.RoleAdmin, kindAPI, s.apiDeleteChannelCredential},
	}
}

// sessionCookie holds the session id; loginCookie the pre-session CSRF token of the sign-in form.
const (
	sessionCookie = "idemops_session"
	loginCookie   = "idemops_login"
)

// enforce is the one enforcement point: it authenticates the caller (session or bearer token),
// checks the route's minimum role, for state-changing page requests the CSRF token, and the
// scope of the object the path names (routeScope).
func (s *Server) enforce(rt route) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := &request{ip: c.ClientIP()}
		if c.Request.Method == http.MethodGet && !isHTMX(c) {
			r.here = c.Request.URL.RequestURI()
		}
		if rt.Min != access.RoleNone {
			if err := s.authenticate(c, rt, r); err != nil {
				s.fail(c, r, rt.Kind, err)
				return
			}
			// From here on the request's statements run under the operator's tenants (a refusal's
			// count included).
			c.Request = c.Request.WithContext(access.Bind(c.Request.Context(), r.op))
			if r.op.Role < rt.Min {
				ctx, cancel := s.ctx(c)
				s.auditRefusal(ctx, r, rt.Method+" "+rt.Path, "", ErrForbidden)
				cancel()
				s.fail(c, r, rt.Kind, forbiddenBelow(rt.Min))
				return
			}
			// The operator's zone reaches every template through the context (templates.At).
			if loc, err := templates.LoadZone(r.op.TimeZone); err == nil {
				c.Request = c.Request.WithContext(templates.WithZone(c.Request.Context(), loc))
			}
			operatorLanguage(c, r.op)
		}
		// After authentication, so nobody unauthenticated makes the server parse an upload.
		if err := checkInput(c); err != nil {
			s.fail(c, r, rt.Kind, err)
			return
		}
		if rt.Min != access.RoleNone {
			if rt.Kind == kindPage && rt.Method != http.MethodGet {
				if err := r.sess.CheckCSRF(formCSRF(c)); err != nil {
					s.fail(c, r, rt.Kind, err)
					return
				}
			}
			// The object the path names, within the caller's tenants (scope.go), before anything.
			if err := s.routeScope(c, r, rt); err != nil {
				s.fail(c, r, rt.Kind, err)
				return
			}
		}
		if err := rt.Handle(c, r); err != nil {
			s.fail(c, r, rt.Kind, err)
		}
	}
}

func formCSRF(c *gin.Context) string {
	if t := c.GetHeader("X-CSRF-Token"); t != "" {
		return t
	}
	return c.PostForm("csrf")
}

func (s *Server) authenticate(c *gin.Context, rt route, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if rt.Kind == kindAPI {
		h := c.GetHeader("Authorization")
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return access.ErrUnauthenticated
		}
		op, err := s.ops.ByToken(ctx, strings.TrimSpace(secret))
		if err != nil {
			return err
		}
		r.op = op
		return nil
	}
	cookie, err := c.Cookie(sessionCookie)
	if err != nil {
		return access.ErrUnauthenticated
	}
	sess, err := s.sessions.Load(ctx, cookie)
	if err != nil {
		return err
	}
	r.op, r.sess = sess.Operator, sess
	return nil
}

// fail is the one error responder: it logs unexpected errors and answers in the route's kind.
func (s *Server) fail(c *gin.Context, r *request, kind routeKind, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		s.cfg.Logger.Error("console request failed", "method", c.Request.Method, "route", c.FullPath(), "err", err)
	}
	if c.Writer.Written() {
		return
	}
	switch kind {
	case kindAPI:
		if status == http.StatusUnauthorized {
			c.Header("WWW-Authenticate", `Bearer realm="idemops"`)
		}
		c.JSON(status, gin.H{"error": publicMessage(err), "status": status, "type": errs.KindOf(err).String()})
		return
	case kindProbe:
		c.String(status, publicMessage(err))
		return
	}
	if errors.Is(err, access.ErrUnauthenticated) {
		target := "/login"
		if c.Request.Method == http.MethodGet && c.Request.URL.Path != "/" {
			target += "?next=" + url.QueryEscape(c.Request.URL.RequestURI())
		}
		c.Redirect(http.StatusSeeOther, target)
		return
	}
	s.render(c, status, templates.ErrorPage(chrome(r, ""), templates.ErrorView{
		Status: status, Title: http.StatusText(status), Message: pageMessage(c.Request.Context(), err)}))
}

// render writes a component with the request's context.
func (s *Server) render(c *gin.Context, status int, comp templ.Component) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(status)
	if err := comp.Render(c.Request.Context(), c.Writer); err != nil {
		s.cfg.Logger.Error("render failed", "route", c.FullPath(), "err", err)
	}
}

// chrome is the page frame for the caller.
func chrome(r *request, active string) templates.Chrome {
	if r == nil || r.op == nil {
		return templates.Chrome{}
	}
	ch := templates.Chrome{User: r.op.Name, Role: r.op.Role.String(), Active: active,
		IsAdmin: r.op.Role >= access.RoleAdmin, IsOperator: r.op.Role >= access.RoleOperator}
	if r.sess != nil {
		ch.CSRF = r.sess.CSRF
	}
	ch.TimeZone, ch.Here = r.op.TimeZone, r.here
	return ch
}

func isHTMX(c *gin.Context) bool { return c.GetHeader("HX-Request") == "true" }
