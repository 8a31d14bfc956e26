package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Resolving, ignoring, recovering and reopening a finding: findingAction is the one action; the
// page and the API handler only decode and answer. A refused form comes back in place — the
// findings page it was sent from, its form open with what was typed and the field's error in
// the operator's language — never an error page.

// findingAction is the one finding action both handlers share: resolve, ignore, recover or
// reopen the finding op may see, under findingTimeout (recover looks the document up).
func (s *Server) findingAction(ctx context.Context, r *request, action string, id int64, reasonCode, note string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.findingTimeout())
	defer cancel()
	_, fc, err := s.findingIn(ctx, r.op, id)
	if err != nil {
		return nil, err
	}
	// In the finding's own cell: a recover completes the key through that cell's claim store.
	switch rec := fc.recon; action {
	case reconcile.ActionResolve:
		return rec.Resolve(ctx, id, s.reconActor(r), reasonCode, note)
	case reconcile.ActionIgnore:
		return rec.Ignore(ctx, id, s.reconActor(r), reasonCode, note)
	case reconcile.ActionRecover:
		return rec.Recover(ctx, id, s.reconActor(r), note)
	case reconcile.ActionReopen:
		return rec.Reopen(ctx, id, s.reconActor(r), reasonCode, note)
	}
	return nil, fmt.Errorf("finding action %q: %w", action, ErrNotFound)
}

// findingTimeout bounds an action: recover looks the document up downstream.
func (s *Server) findingTimeout() time.Duration { return s.cfg.QueryTimeout + s.cfg.LookupTimeout }

// findingActionNotices are the notices after each action.
var findingActionNotices = map[string]string{reconcile.ActionResolve: "resolved", reconcile.ActionIgnore: "ignored",
	reconcile.ActionRecover: "recovered", reconcile.ActionReopen: "reopened"}

// findingActionPage is POST /reconcile/findings/{id}/{resolve,ignore,recover,reopen} (operators)
// with "reason_code" and "note". Done, it goes back to the findings page it came from ("back",
// same filters) with a notice; refused (bad input, a finding no longer open, recover that does
// not apply), it renders that page again with the form open, as typed, and why.
func (s *Server) findingActionPage(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		reasonCode, note := c.PostForm("reason_code"), c.PostForm("note")
		_, err = s.findingAction(c.Request.Context(), r, action, id, reasonCode, note)
		back := findingsBack(c.PostForm("back"), "")
		if err == nil {
			c.Redirect(http.StatusSeeOther, findingsBack(back, findingActionNotices[action]))
			return nil
		}
		status := statusOf(err)
		if status != http.StatusBadRequest && status != http.StatusConflict {
			return err
		}
		form := &templates.FindingForm{FindingID: id, Action: action, ReasonCode: reasonCode, Note: note,
			Error: pageMessage(c.Request.Context(), err), Field: errorField(err)}
		return s.renderFindingsAgain(c, r, back, form, status)
	}
}

// errorField is the field a field error names ("" for another error).
func errorField(err error) string {
	var fe *errs.FieldError
	if errors.As(err, &fe) {
		return fe.Name
	}
	return ""
}

// renderFindingsAgain renders the findings page back (a local URL) with form open on it: the
// finding it is about is listed first when the page would not show it.
func (s *Server) renderFindingsAgain(c *gin.Context, r *request, back string, form *templates.FindingForm, status int) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	u, _ := url.Parse(back)
	q := u.Query()
	q.Del("notice")
	if form.FindingID != 0 {
		q.Set("view", "list") // the form is on its finding's row
	}
	v, err := s.findingsView(ctx, r, q, form)
	if err != nil && !isFormError(err) {
		return err
	}
	if form.FindingID != 0 {
		shown := false
		for _, row := range v.Rows {
			shown = shown || row.ID == form.FindingID
		}
		if !shown {
			f, err := s.getFinding(ctx, r.op, form.FindingID)
			if err != nil {
				return err
			}
			names, err := s.findingKeyNames(ctx, r.op, []reconcile.Finding{*f})
			if err != nil {
				return err
			}
			one := []templates.FindingRow{findingRow(*f, names)}
			if err := s.findingChannelKinds(ctx, one); err != nil {
				return err
			}
			v.Rows = append(one, v.Rows...)
		}
		// The form comes back on its row only where the row offers it (resolve and ignore on an
		// open finding, recover where it applies, reopen on a closed one); otherwise the page
		// says why at its top.
		for _, row := range v.Rows {
			if row.ID == form.FindingID && !formOnRow(row, form.Action) {
				v.Error = form.Error
			}
		}
	}
	s.render(c, status, templates.FindingsPage(chrome(r, "reconcile"), v))
	return nil
}

// formOnRow says whether row shows the form of action.
func formOnRow(row templates.FindingRow, action string) bool {
	switch action {
	case reconcile.ActionResolve, reconcile.ActionIgnore:
		return row.State == string(reconcile.FindingOpen)
	case reconcile.ActionRecover:
		return row.State == string(reconcile.FindingOpen) && row.CanRecover
	}
	return row.State != string(reconcile.FindingOpen)
}

// findingsBack is the findings page to return to: back when it is one (a local path under
// /reconcile/findings), else the findings page; with the notice set (none: "").
func findingsBack(back, notice string) string {
	if !strings.HasPrefix(back, "/reconcile/findings") || strings.ContainsAny(back, "\r\n") {
		back = "/reconcile/findings"
	}
	u, err := url.Parse(back)
	if err != nil || u.Host != "" || u.Scheme != "" {
		u = &url.URL{Path: "/reconcile/findings"}
	}
	q := u.Query()
	q.Del("notice")
	if notice != "" {
		q.Set("notice", notice)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// apiFindingAction is POST /api/v1/reconcile/findings/{id}/{resolve,ignore,recover,reopen}
// (operators) with {"reason_code", "note"}.
func (s *Server) apiFindingAction(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		var b struct {
			ReasonCode string `json:"reason_code"`
			Note       string `json:"note"`
		}
		if err := bindJSON(c, &b); err != nil {
			return err
		}
		out, err := s.findingAction(c.Request.Context(), r, action, id, b.ReasonCode, b.Note)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, out)
		return nil
	}
}
