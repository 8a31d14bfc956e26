package console

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/retention"
	"github.com/idemops/idemops/templates"
)

// policyInput reads a policy from form or JSON values; a period that does not parse is an
// input error naming its field.
func policyInput(operation, state, keepResponse, keepKey string) (retention.Policy, error) {
	p := retention.Policy{Operation: strings.TrimSpace(operation), State: claim.State(strings.TrimSpace(state))}
	var err error
	if p.KeepResponse, err = retention.ParsePeriod(keepResponse); err != nil {
		return p, inputErr("keep_response", "%s", err.Error())
	}
	if p.KeepKey, err = retention.ParsePeriod(keepKey); err != nil {
		return p, inputErr("keep_key", "%s", err.Error())
	}
	return p, nil
}

// shorterError stops the save of a policy below the default periods until the page's
// confirmation box is ticked; text names the consequence.
type shorterError struct{ why errs.Phrase }

func (e *shorterError) Error() string { return e.why.String() }

// savePolicy saves p (checked against the floor) with its audit row. From the page, a policy below
// the default periods needs confirmed (the API takes the periods as given).
func (s *Server) savePolicy(ctx context.Context, r *request, p retention.Policy, confirmed bool) error {
	// A policy applies to every tenant's keys: only an administrator of every tenant changes it.
	if err := s.authorize(ctx, r, "retention.policy.save", access.ObjPolicy, p.Operation+"/"+string(p.State)); err != nil {
		return err
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := retention.SavePolicy(ctx, tx, p, r.op.Actor()); err != nil {
			return err
		}
		if why := s.shorterThanDefault(p); why.Format != "" && !confirmed {
			return &shorterError{why}
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Tenants: []string{access.AllTenants}, Action: "retention.policy.save",
			Target: "policy:" + p.Operation + "/" + string(p.State),
			Detail: map[string]any{"keep_response": retention.FormatPeriod(p.KeepResponse), "keep_key": retention.FormatPeriod(p.KeepKey)}})
	})
	if err != nil {
		return err
	}
	return s.inOtherCells(ctx, func(ctx context.Context, c *cell) error { // each cell's daemon purges by its own copy
		return c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return retention.SavePolicy(ctx, tx, p, r.op.Actor()) })
	})
}

// isFormError is an error the form shows next to its fields (400) rather than an error page.
func isFormError(err error) bool { return statusOf(err) == http.StatusBadRequest }

// savePolicyPage is POST /retention/policies (administrators). Bad input re-renders the page
// with the form as sent and the reason (field and floor); nothing is saved then.
func (s *Server) savePolicyPage(c *gin.Context, r *request) error {
	form := templates.PolicyForm{Operation: c.PostForm("operation"), State: c.PostForm("state"),
		KeepResponse: c.PostForm("keep_response"), KeepKey: c.PostForm("keep_key")}
	ctx, cancel := s.ctx(c)
	defer cancel()
	p, err := policyInput(form.Operation, form.State, form.KeepResponse, form.KeepKey)
	if err == nil {
		err = s.savePolicy(ctx, r, p, c.PostForm("confirm_shorter") == "yes")
	}
	if shorter := (*shorterError)(nil); errors.As(err, &shorter) {
		form.Shorter = shorter.why
		return s.retentionAgain(ctx, c, r, http.StatusOK, func(v *templates.RetentionView) { v.Form = form })
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		form.Error = pageMessage(c.Request.Context(), err)
		return s.retentionAgain(ctx, c, r, http.StatusBadRequest, func(v *templates.RetentionView) { v.Form = form })
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=saved")
	return nil
}

// retentionAgain shows the retention page again with a form as the operator filled it (an error
// to fix, or a consequence to confirm).
func (s *Server) retentionAgain(ctx context.Context, c *gin.Context, r *request, status int, fill func(*templates.RetentionView)) error {
	v, err := s.retentionView(ctx, r, "")
	if err != nil {
		return err
	}
	fill(&v)
	s.render(c, status, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

// shorterThanDefault says what a policy below the deployment's default periods does, or the zero
// Phrase when it keeps responses and keys at least as long as the default.
func (s *Server) shorterThanDefault(p retention.Policy) errs.Phrase {
	def := s.claims.Config()
	if p.KeepResponse >= def.KeepResponse && p.KeepKey >= def.KeepKey {
		return errs.Phrase{}
	}
	return errs.Phrasef("This is shorter than the default (responses %s, keys %s): keys of %s that end %s lose their stored response after %s "+
		"(a retry then gets 410 instead of the replay) and are deleted after %s (a retry then executes again). Tick the box to save it.",
		def.KeepResponse, def.KeepKey, p.Operation, p.State, p.KeepResponse, p.KeepKey)
}

// apiSavePolicy is POST /api/v1/retention/policies {"operation","state","keep_response","keep_key"}
// (administrators); periods as "72h" or "30d".
func (s *Server) apiSavePolicy(c *gin.Context, r *request) error {
	var b apiPolicy
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	p, err := policyInput(b.Operation, b.State, b.KeepResponse, b.KeepKey)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.savePolicy(ctx, r, p, true); err != nil {
		return err
	}
	c.JSON(http.StatusOK, apiPolicy{Operation: p.Operation, State: string(p.State),
		KeepResponse: retention.FormatPeriod(p.KeepResponse), KeepKey: retention.FormatPeriod(p.KeepKey)})
	return nil
}
