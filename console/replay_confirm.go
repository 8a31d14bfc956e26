package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// confirm is the confirmation (POST /keys/{id}/replay, POST /api/v1/keys/{id}/replay).
func (s *Server) confirm(c *gin.Context, r *request, keyID int64, token, reason string) (*replay.Request, bool, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	return s.ConfirmReplay(ctx, r.op, r.ip, keyID, token, reason)
}

// confirmReplay is POST /keys/{id}/replay: the confirmation. It redirects to the request's page
// (a second submit of the same confirmation lands on the same request); a refusal shows the
// preview again with the reason.
func (s *Server) confirmReplay(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	req, _, err := s.confirm(c, r, id, c.PostForm("token"), c.PostForm("reason"))
	if isRefusal(err) || isFieldError(err) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
		defer cancel()
		k, p, kerr := s.previewAction(ctx, c, r)
		if kerr != nil {
			return kerr
		}
		v, verr := s.replayPreviewView(ctx, r, k, p)
		if verr != nil {
			return verr
		}
		v.Error, v.Reason = pageMessage(c.Request.Context(), err), c.PostForm("reason")
		s.render(c, statusOf(err), templates.ReplayPreviewPage(chrome(r, "keys"), v))
		return nil
	}
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", req.ID))
	return nil
}

type confirmBody struct {
	Token  string `json:"token"`
	Reason string `json:"reason"`
}

// apiReplayConfirm is POST /api/v1/keys/{id}/replay {token, reason}: 201 with the request; 200
// with the same request when the token was used before (nothing is executed again); 409 with
// the reason when a guard refuses.
func (s *Server) apiReplayConfirm(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	var b confirmBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	req, dup, err := s.confirm(c, r, id, b.Token, b.Reason)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if dup {
		status = http.StatusOK
	}
	c.JSON(status, gin.H{"request": req, "duplicate": dup})
	return nil
}
