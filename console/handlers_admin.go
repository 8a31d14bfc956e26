package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// notices are the fixed messages a redirect after an admin action may show.
var notices = map[string]string{
	"added":    "Operator added.",
	"access":   "Role and tenants saved; the operator's sessions were ended.",
	"disabled": "Operator disabled; their sessions were ended and their tokens stopped working.",
	"enabled":  "Operator enabled.",
}

func roleNames() []string {
	out := make([]string, len(access.Roles))
	for i, r := range access.Roles {
		out[i] = r.String()
	}
	return out
}

func (s *Server) operatorsView(c *gin.Context, r *request) (templates.OperatorsView, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	ops, err := s.ops.ListFor(ctx, r.op) // only the operators r.op may manage
	if err != nil {
		return templates.OperatorsView{}, err
	}
	v := templates.OperatorsView{Roles: roleNames(), Notice: notices[c.Query("notice")]}
	for _, o := range ops {
		v.Operators = append(v.Operators, templates.OperatorRow{ID: o.ID, Name: o.Name, Role: o.Role.String(),
			Tenants: strings.Join(o.Tenants, ","), Disabled: o.Disabled, LastLogin: o.LastLoginAt})
	}
	return v, nil
}

func (s *Server) operatorsPage(c *gin.Context, r *request) error {
	v, err := s.operatorsView(c, r)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.OperatorsPage(chrome(r, "operators"), v))
	return nil
}

// adminError shows a bad form on the operators page itself, with the reason.
func (s *Server) adminError(c *gin.Context, r *request, err error) error {
	if code := statusOf(err); code != http.StatusBadRequest && code != http.StatusConflict && code != http.StatusForbidden {
		return err
	}
	v, verr := s.operatorsView(c, r)
	if verr != nil {
		return verr
	}
	v.Error = pageMessage(c.Request.Context(), err)
	s.render(c, statusOf(err), templates.OperatorsPage(chrome(r, "operators"), v))
	return nil
}

// grantable checks that an admin grants only tenants they may see themselves.
func grantable(admin *access.Operator, tenants []string) error {
	for _, t := range tenants {
		if !admin.MaySee(t) {
			return errs.Refused(errs.Forbidden, errs.Phrasef("you may not grant tenant %q: it is not one of yours", t))
		}
	}
	return nil
}

func (s *Server) change(r *request) access.Change {
	return access.Change{Actor: r.op.Actor(), IP: r.ip, Scope: r.op.Tenants}
}

func (s *Server) addOperator(c *gin.Context, r *request) error {
	role, err := access.ParseRole(c.PostForm("role"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	tenants, err := access.ParseTenants(c.PostForm("tenants"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	if err := grantable(r.op, tenants); err != nil {
		s.refuse(c, r, "operator.add", "operator:"+strings.TrimSpace(c.PostForm("name")), err)
		return s.adminError(c, r, err)
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	_, err = s.ops.Add(ctx, s.change(r), access.NewOperator{Name: strings.TrimSpace(c.PostForm("name")),
		Password: c.PostForm("password"), Role: role, Tenants: tenants})
	if err != nil {
		return s.adminError(c, r, err)
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice=added")
	return nil
}

// target loads the operator the route names, for the acting operator (see loadOperatorFor); a
// refusal is audited under action.
func (s *Server) target(c *gin.Context, r *request, action string) (*access.Operator, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	o, err := s.loadOperatorFor(ctx, r, c.Param("id"))
	if err != nil && errors.Is(err, ErrNotFound) {
		s.auditRefusal(ctx, r, action, "operator-id:"+c.Param("id"), err)
	}
	return o, err
}

// refuse audits a refused admin action on target.
func (s *Server) refuse(c *gin.Context, r *request, action, target string, err error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	s.auditRefusal(ctx, r, action, target, err)
}

// refusable reports whether err is a refusal worth an audit row (not a malformed form).
func refusable(err error) bool {
	return errors.Is(err, ErrForbidden) || isRefusal(err) || errors.Is(err, ErrNotFound)
}

func (s *Server) setAccess(c *gin.Context, r *request) error {
	o, err := s.target(c, r, "operator.set_access")
	if err != nil {
		return err
	}
	role, err := access.ParseRole(c.PostForm("role"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	tenants, err := access.ParseTenants(c.PostForm("tenants"))
	if err != nil {
		return s.adminError(c, r, err)
	}
	if err := grantable(r.op, tenants); err != nil {
		s.refuse(c, r, "operator.set_access", "operator:"+o.Name, err)
		return s.adminError(c, r, err)
	}
	if o.ID == r.op.ID && role < access.RoleAdmin {
		return s.adminError(c, r, inputErr("role", "you cannot lower your own role (ask another admin)"))
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetAccess(ctx, s.change(r), o.Name, role, tenants); err != nil {
		if refusable(err) {
			s.auditRefusal(ctx, r, "operator.set_access", "operator:"+o.Name, err)
		}
		return s.adminError(c, r, err)
	}
	if o.ID == r.op.ID { // our own session ended with the change
		c.Redirect(http.StatusSeeOther, "/login")
		return nil
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice=access")
	return nil
}

func (s *Server) setStatus(c *gin.Context, r *request) error {
	o, err := s.target(c, r, "operator.status")
	if err != nil {
		return err
	}
	disabled := c.PostForm("disabled") == "true"
	if disabled && o.ID == r.op.ID {
		err := refused("you cannot disable yourself (ask another admin)")
		s.refuse(c, r, "operator.disable", "operator:"+o.Name, err)
		return s.adminError(c, r, err)
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.ops.SetDisabled(ctx, s.change(r), o.Name, disabled); err != nil {
		if refusable(err) {
			s.auditRefusal(ctx, r, "operator.disable", "operator:"+o.Name, err)
		}
		return s.adminError(c, r, err)
	}
	notice := "enabled"
	if disabled {
		notice = "disabled"
	}
	c.Redirect(http.StatusSeeOther, "/admin/operators?notice="+notice)
	return nil
}

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

// auditPage lists the audit log with filters; an admin limited to some tenants sees their
// tenants' rows and the rows of no tenant (sign-ins, operator changes).
func (s *Server) auditPage(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	v := templates.AuditView{Search: templates.AuditSearch{Actor: q.Get("actor"), Action: q.Get("action"),
		Tenant: q.Get("tenant"), Target: q.Get("target"), From: q.Get("from"), To: q.Get("to")}, IsFirst: q.Get("before") == ""}
	f := audit.Filter{Actor: v.Search.Actor, Action: v.Search.Action, Tenant: v.Search.Tenant, Target: v.Search.Target}
	if !r.op.SeesAllTenants() {
		f.Tenants = r.op.Tenants
	}
	base := url.Values{}
	for _, k := range []string{"actor", "action", "tenant", "target", "from", "to"} {
		if q.Get(k) != "" {
			base.Set(k, q.Get(k))
		}
	}
	v.FirstURL = "/audit?" + base.Encode()
	var err error
	if f.From, err = parseTime("from", q.Get("from")); err == nil {
		f.To, err = parseTime("to", q.Get("to"))
	}
	if b := q.Get("before"); err == nil && b != "" {
		if f.Before, err = strconv.ParseInt(b, 10, 64); err != nil {
			err = inputErr("before", "is not a row number")
		}
	}
	if err != nil {
		v.Error = pageMessage(c.Request.Context(), err)
		s.render(c, http.StatusBadRequest, templates.AuditPage(chrome(r, "audit"), v))
		return nil
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, more, err := s.audit.List(ctx, f)
	if err != nil {
		return err
	}
	var keyIDs []int64
	for _, a := range rows {
		v.Rows = append(v.Rows, templates.AuditRow{Seq: a.Seq, At: a.At, Actor: a.Actor, Action: a.Action,
			Target: a.Target, Tenant: a.Tenant, Detail: a.Detail, IP: a.IP, Hash: a.Hash})
		if id, ok := auditKeyTarget(a.Target); ok {
			keyIDs = append(keyIDs, id)
		}
	}
	names, err := s.keyNames(ctx, r.op, keyIDs)
	if err != nil {
		return err
	}
	for i := range v.Rows {
		if id, ok := auditKeyTarget(v.Rows[i].Target); ok {
			v.Rows[i].Key = names[id]
		}
	}
	if more {
		nq := url.Values{}
		for k, vs := range base {
			nq[k] = vs
		}
		nq.Set("before", strconv.FormatInt(rows[len(rows)-1].Seq, 10))
		v.NextURL = "/audit?" + nq.Encode()
	}
	s.render(c, http.StatusOK, templates.AuditPage(chrome(r, "audit"), v))
	return nil
}
