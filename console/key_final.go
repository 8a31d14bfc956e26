package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/replay"
)

// markFinalPage is POST /keys/{id}/final (administrators).
func (s *Server) markFinalPage(c *gin.Context, r *request) error {
	return s.adminKeyPage(c, r, s.markFinal)
}

// releasePage is POST /keys/{id}/release (administrators).
func (s *Server) releasePage(c *gin.Context, r *request) error {
	return s.adminKeyPage(c, r, s.releaseForRetry)
}

// adminKeyPage runs an administrator's action on the key of the path with the form's token and
// reason, and goes back to the key's page.
func (s *Server) adminKeyPage(c *gin.Context, r *request, act keyAction) error {
	k, err := s.runKeyAction(c, r, act, c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", k.ID))
	return nil
}

// keyAction is an administrator's action on one key, confirmed by the token of its preview.
type keyAction func(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error)

// runKeyAction runs act on the key the path names, for the page and the API alike.
func (s *Server) runKeyAction(c *gin.Context, r *request, act keyAction, token, reason string) (*claim.Key, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	return act(ctx, r.op, r.ip, id, token, reason)
}

// apiMarkFinal is POST /api/v1/keys/{id}/final {token, reason} (administrators; the token is
// the preview's final_token).
func (s *Server) apiMarkFinal(c *gin.Context, r *request) error {
	return s.apiKeyAction(c, r, s.markFinal)
}

// apiRelease is POST /api/v1/keys/{id}/release {token, reason} (administrators; the token is
// the release_token of GET /api/v1/keys/{id}/final).
func (s *Server) apiRelease(c *gin.Context, r *request) error {
	return s.apiKeyAction(c, r, s.releaseForRetry)
}

// apiKeyAction answers an administrator's key action taking {token, reason} with the key after it.
func (s *Server) apiKeyAction(c *gin.Context, r *request, act keyAction) error {
	var b confirmBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	k, err := s.runKeyAction(c, r, act, b.Token, b.Reason)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"id": k.ID, "state": k.State, "version": k.Version})
	return nil
}

// apiFinalToken is GET /api/v1/keys/{id}/final (administrators): the tokens a mark-final
// (token) and a release for retry (release_token) confirm, bound to the key's current version.
func (s *Server) apiFinalToken(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, kc, err := s.keyParamIn(ctx, c, r)
	if err != nil {
		return err
	}
	out := gin.H{"id": k.ID, "state": k.State, "version": k.Version, "allowed": k.Replayable(), "refusal": k.ReplayRefusal()}
	if k.Replayable() {
		out["token"] = kc.replays.ConfirmToken(replay.ActionFinal, r.op.ID, k.ID, k.Version)
		out["release_token"] = kc.replays.ConfirmToken(replay.ActionRelease, r.op.ID, k.ID, k.Version)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// markFinal is replay's MarkFinal of the key keyID, read within op's scope.
func (s *Server) markFinal(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	k, kc, err := s.keyIn(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	return kc.replays.MarkFinal(ctx, replayActor(op, ip), k, token, reason)
}

// releaseForRetry is replay's ReleaseForRetry of the key keyID, read within op's scope.
func (s *Server) releaseForRetry(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	k, kc, err := s.keyIn(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	return kc.replays.ReleaseForRetry(ctx, replayActor(op, ip), k, token, reason)
}
