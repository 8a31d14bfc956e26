package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/replay"
)

// approve is a second operator's approval of the request named by {id}, which then runs
// (POST /replays/{id}/approve, POST /api/v1/replays/{id}/approve).
func (s *Server) approve(c *gin.Context, r *request) (*replay.Request, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	return s.ApproveReplay(ctx, r.op, r.ip, id)
}

// approveReplayPage is POST /replays/{id}/approve.
func (s *Server) approveReplayPage(c *gin.Context, r *request) error {
	req, err := s.approve(c, r)
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", req.ID))
	return nil
}

// apiReplayApprove is POST /api/v1/replays/{id}/approve: a second operator approves and the
// replay runs; 403 for the requester.
func (s *Server) apiReplayApprove(c *gin.Context, r *request) error {
	req, err := s.approve(c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, req)
	return nil
}
