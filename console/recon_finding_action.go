package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Resolving, ignoring and recovering a finding: findingAction is the one action; the page and
// the API handler only decode and answer.

// findingAction is the one finding action both handlers share: resolve, ignore or recover the
// finding op may see, under findingTimeout (recover looks the document up downstream).
func (s *Server) findingAction(ctx context.Context, r *request, action string, id int64, reasonCode, note string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.findingTimeout())
	defer cancel()
	if _, err := s.getFinding(ctx, r.op, id); err != nil {
		return nil, err
	}
	switch action {
	case "resolve":
		return s.recon.Resolve(ctx, id, s.reconActor(r), strings.TrimSpace(reasonCode), note)
	case "ignore":
		return s.recon.Ignore(ctx, id, s.reconActor(r), note)
	case "recover":
		return s.recon.Recover(ctx, id, s.reconActor(r), note)
	}
	return nil, fmt.Errorf("finding action %q: %w", action, ErrNotFound)
}

// findingTimeout bounds an action: recover looks the document up downstream.
func (s *Server) findingTimeout() time.Duration { return s.cfg.QueryTimeout + s.cfg.LookupTimeout }

// findingActionPage is POST /reconcile/findings/{id}/{resolve,ignore,recover} (operators); the
// note (ignore: the reason) is the "note" field, the reason code "reason_code". It goes back to
// the findings page it came from (same filters) with a notice.
func (s *Server) findingActionPage(action string) func(c *gin.Context, r *request) error {
	notice := map[string]string{"resolve": "resolved", "ignore": "ignored", "recover": "recovered"}[action]
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		if _, err := s.findingAction(c.Request.Context(), r, action, id, c.PostForm("reason_code"), c.PostForm("note")); err != nil {
			return err
		}
		c.Redirect(http.StatusSeeOther, findingsBack(c.PostForm("back"), notice))
		return nil
	}
}

// findingsBack is the findings page to return to: back when it is one (a local path under
// /reconcile/findings), else the findings page; with the notice set.
func findingsBack(back, notice string) string {
	if !strings.HasPrefix(back, "/reconcile/findings") || strings.ContainsAny(back, "\r\n") {
		back = "/reconcile/findings"
	}
	u, err := url.Parse(back)
	if err != nil || u.Host != "" || u.Scheme != "" {
		u = &url.URL{Path: "/reconcile/findings"}
	}
	q := u.Query()
	q.Set("notice", notice)
	u.RawQuery = q.Encode()
	return u.String()
}

// apiFindingAction is POST /api/v1/reconcile/findings/{id}/{resolve,ignore,recover} (operators)
// with {"reason_code", "note"} (ignore: "reason" or "note").
func (s *Server) apiFindingAction(action string) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		var b struct {
			ReasonCode string `json:"reason_code"`
			Reason     string `json:"reason"`
			Note       string `json:"note"`
		}
		if err := bindJSON(c, &b); err != nil {
			return err
		}
		if b.Note == "" {
			b.Note = b.Reason
		}
		out, err := s.findingAction(c.Request.Context(), r, action, id, b.ReasonCode, b.Note)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, out)
		return nil
	}
}
