package console

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// getReplay reads a request op may see (another tenant's is ErrNotFound).
func (s *Server) getReplay(ctx context.Context, op *access.Operator, id int64) (*replay.Request, error) {
	req, _, err := s.replayIn(ctx, op, id)
	return req, err
}

// replayIn is getReplay with the cell the request lives in (its key's).
func (s *Server) replayIn(ctx context.Context, op *access.Operator, id int64) (*replay.Request, *cell, error) {
	return findIn(ctx, s.cells, op, access.ObjReplay, id, func(ctx context.Context, c *cell, id int64) (*replay.Request, error) {
		return c.replays.Request(ctx, id)
	}, func(r *replay.Request) string { return r.Tenant })
}

// replayParam reads the request named by the route's {id} (GET /replays/{id}, GET
// /api/v1/replays/{id}).
func (s *Server) replayParam(ctx context.Context, c *gin.Context, r *request) (*replay.Request, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	return s.getReplay(ctx, r.op, id)
}

// replayPage is GET /replays/{id}.
func (s *Server) replayPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	req, rc, err := s.replayIn(ctx, r.op, id)
	if err != nil {
		return err
	}
	row := s.replayRow(ctx, req, r.op)
	if req.State == "executing" {
		row.Waiting = rc.replays.Waiting(ctx, req.KeyID)
	}
	one := []templates.ReplayRow{row}
	if err := s.nameReplayRows(ctx, r.op, one); err != nil {
		return err
	}
	row = one[0]
	s.render(c, http.StatusOK, templates.ReplayPage(chrome(r, "replays"), templates.ReplayView{Req: row}))
	return nil
}

// apiReplay is GET /api/v1/replays/{id}.
func (s *Server) apiReplay(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	req, err := s.replayParam(ctx, c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, req)
	return nil
}
