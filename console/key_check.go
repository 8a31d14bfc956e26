package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// checkDownstream asks the key's Operation, read-only, whether downstream has the document, and
// records the answer in the key's history and the audit log.
func (s *Server) checkDownstream(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	// The lookup has its own timeout; the reads and records around it share this one.
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	k, kc, err := s.keyIn(ctx, r.op, id)
	if err != nil {
		return err
	}
	check := s.lookup(c.Request.Context(), r.op, k)
	detail := map[string]any{"found": check.Found}
	answer := "not_found"
	switch {
	case check.Error.Format != "":
		detail["error"], answer = check.Error.String(), "error"
	case check.Found:
		detail["summary"], answer = check.Summary.String(), "found"
	}
	s.metrics.checks.WithLabelValues(answer).Inc()
	if err := kc.claims.RecordEvent(ctx, k.ID, "downstream_checked", r.op.Actor(), detail); err != nil {
		return err
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "key.check_downstream",
		Target: fmt.Sprintf("key:%d", k.ID), Tenants: []string{k.Tenant},
		Detail: map[string]any{"digest": k.KeyDigest, "answer": answer}}); err != nil {
		return err
	}
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	v.Check = check
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.CheckResult(chrome(r, "keys"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}

// lookup runs the Operation's read-only Lookup with the lease fields taken from the key.
func (s *Server) lookup(parent context.Context, op *access.Operator, k *claim.Key) templates.CheckView {
	v := templates.CheckView{Done: true}
	if s.cfg.Operations == nil {
		v.Error = errs.Phrasef("this console has no downstream operations configured")
		return v
	}
	o, ok := s.cfg.Operations(k.Operation)
	if !ok {
		v.Error = errs.Phrasef("no operation %q is registered", k.Operation)
		return v
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.LookupTimeout)
	defer cancel()
	doc, err := claim.LookupSafely(ctx, o, k.LookupLease(op.Actor()))
	switch {
	case err != nil:
		v.Error = errs.Verbatim(truncate(err.Error(), 300))
	case doc == nil:
	case doc.Failure != nil:
		v.Found, v.Summary = true, errs.Phrasef("failed (%s: %s)", doc.Failure.Code, truncate(doc.Failure.Detail, 200))
	default:
		v.Found, v.Summary = true, errs.Phrasef("resource %s", doc.ResourceID)
	}
	return v
}
