package console

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/templates"
)

// reveal shows the request and response bodies, after recording the reveal in the audit log
// and in the key's history: no audit row, no reveal.
func (s *Server) reveal(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, kc, err := s.keyParamIn(ctx, c, r)
	if err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "key.reveal",
		Target: fmt.Sprintf("key:%d", k.ID), Tenants: []string{k.Tenant},
		Detail: map[string]any{"digest": k.KeyDigest, "operation": k.Operation, "fields": []string{"request", "response"}}}); err != nil {
		return err
	}
	if err := kc.claims.RecordEvent(ctx, k.ID, "revealed", r.op.Actor(), map[string]any{"fields": []string{"request", "response"}}); err != nil {
		return err
	}
	s.metrics.reveals.Inc()
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	v.Request.Revealed, v.Request.Text = true, prettyJSON(k.Request)
	v.Response.Revealed, v.Response.Text = true, bodyText(k.ResponseBody)
	v.Headers = string(k.ResponseHeaders)
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.Bodies(chrome(r, "keys"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}
