package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
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

func (s *Server) change(r *request) access.Change {
	return access.Change{Actor: r.op.Actor(), IP: r.ip, Scope: r.op.Tenants}
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
