package console

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/replay"
)

// startBulk starts a previewed bulk replay as a daemon job (POST /replays/bulk/start, POST
// /api/v1/replays/bulk/start).
func (s *Server) startBulk(c *gin.Context, r *request, plan, token, reason string) (*replay.BulkRun, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.replays.StartBulk(ctx, actorOf(r), plan, token, reason)
	return run, err
}

// bulkStartPage is POST /replays/bulk/start {plan, token, reason}: creates the previewed run and
// hands it to the daemon in one step, then shows its progress.
func (s *Server) bulkStartPage(c *gin.Context, r *request) error {
	run, err := s.startBulk(c, r, c.PostForm("plan"), c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/bulk/%d", run.ID))
	return nil
}

// apiBulkStart is POST /api/v1/replays/bulk/start {plan, token, reason} (plan and token from the
// preview): 202 with the run, created and handed to the daemon in one step; poll GET for progress.
func (s *Server) apiBulkStart(c *gin.Context, r *request) error {
	var b struct {
		Plan   string `json:"plan"`
		Token  string `json:"token"`
		Reason string `json:"reason"`
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	run, err := s.startBulk(c, r, b.Plan, b.Token, b.Reason)
	if err != nil {
		return err
	}
	c.JSON(http.StatusAccepted, run)
	return nil
}
