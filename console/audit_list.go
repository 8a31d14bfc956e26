package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/templates"
)

// auditPage lists the audit log with filters; an admin limited to some tenants sees the rows
// whose tenants are all theirs (audit.Filter.Scope), never a row that names another tenant or
// "*".
func (s *Server) auditPage(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	v := templates.AuditView{Search: templates.AuditSearch{Actor: q.Get("actor"), Action: q.Get("action"),
		Tenant: q.Get("tenant"), Target: q.Get("target"), From: q.Get("from"), To: q.Get("to")}, IsFirst: q.Get("before") == ""}
	f := audit.Filter{Actor: v.Search.Actor, Action: v.Search.Action, Tenant: v.Search.Tenant, Target: v.Search.Target}
	f.Scope = r.op.Tenants
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
	// The refusals of minutes that are over become their counted rows before the page is read.
	if _, err := s.audit.SealRefusals(ctx); err != nil {
		return err
	}
	rows, more, err := s.audit.List(ctx, f)
	if err != nil {
		return err
	}
	var keyIDs []int64
	for _, a := range rows {
		v.Rows = append(v.Rows, templates.AuditRow{Seq: a.Seq, At: a.At, Actor: a.Actor, Action: a.Action,
			Target: a.Target, Tenant: strings.Join(a.Tenants, ","), Detail: a.Detail, IP: a.IP, Hash: a.Hash})
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
