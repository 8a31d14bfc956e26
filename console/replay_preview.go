package console

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// previewAction reads the key named by the route's {id} within r's scope and previews its
// replay (GET /keys/{id}/replay, GET /api/v1/keys/{id}/replay).
func (s *Server) previewAction(ctx context.Context, c *gin.Context, r *request) (*claim.Key, replay.Preview, error) {
	k, kc, err := s.keyParamIn(ctx, c, r)
	if err != nil {
		return nil, replay.Preview{}, err
	}
	return k, kc.replays.Preview(ctx, actorOf(r), k), nil
}

// replayPreviewView builds the preview page of k for r.
func (s *Server) replayPreviewView(ctx context.Context, r *request, k *claim.Key, p replay.Preview) (templates.ReplayPreviewView, error) {
	v := templates.ReplayPreviewView{Key: k, Preview: templates.ReplayPreviewData{Allowed: p.Allowed, Outcome: string(p.Outcome),
		Text: p.Why, Action: p.Action, Amount: p.Amount, NeedsApproval: p.NeedsApproval, Token: p.Token}}
	kc, err := s.cells.ofKey(k)
	if err != nil {
		return v, err
	}
	if r.op.Role >= access.RoleAdmin && k.Replayable() {
		v.CanMarkFinal, v.FinalToken = true, kc.replays.ConfirmToken(replay.ActionFinal, r.op.ID, k.ID, k.Version)
		v.ReleaseToken = kc.replays.ConfirmToken(replay.ActionRelease, r.op.ID, k.ID, k.Version)
	}
	prior, err := kc.replays.ListForKey(ctx, actorOf(r), k.ID, 20)
	if err != nil {
		return v, err
	}
	for i := range prior {
		v.Requests = append(v.Requests, s.replayRow(ctx, &prior[i], r.op))
	}
	return v, s.nameReplayRows(ctx, r.op, v.Requests)
}

// replayPreview is GET /keys/{id}/replay: the read-only preview and the confirmation form.
func (s *Server) replayPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	k, p, err := s.previewAction(ctx, c, r)
	if err != nil {
		return err
	}
	v, err := s.replayPreviewView(ctx, r, k, p)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.ReplayPreviewPage(chrome(r, "keys"), v))
	return nil
}

// apiReplayPreview is GET /api/v1/keys/{id}/replay.
func (s *Server) apiReplayPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	_, p, err := s.previewAction(ctx, c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, p)
	return nil
}
