package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/templates"
)

// jobRunParam is the job run the path names (the page and the API).
func (s *Server) jobRunParam(c *gin.Context) (*daemon.Run, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := daemon.GetRun(ctx, s.db, id)
	if errors.Is(err, daemon.ErrUnknownRun) {
		return nil, fmt.Errorf("job run %d: %w", id, ErrNotFound)
	}
	return run, err
}

// runError is a job run's error in ctx's language: said from its phrase when the job's error
// carried one; else the stored text looked up whole (the daemon's own fixed texts: a run left
// by an earlier leader, one stopped before its pass was complete), or as it is.
func runError(ctx context.Context, r daemon.Run) string {
	if r.ErrorPhrase.Valid {
		return templates.Say(ctx, r.ErrorPhrase.Phrase)
	}
	return templates.SayText(ctx, r.Error)
}

// jobRunPage is GET /jobs/runs/:id: one run with its progress, timings, stats and error.
func (s *Server) jobRunPage(c *gin.Context, r *request) error {
	run, err := s.jobRunParam(c)
	if err != nil {
		return err
	}
	row := jobRunRow(c.Request.Context(), *run)
	row.Error = runError(c.Request.Context(), *run)
	s.render(c, http.StatusOK, templates.JobRunPage(chrome(r, "jobs"), row))
	return nil
}

// apiJobRun is GET /api/v1/jobs/runs/{id}: one run with its progress, stats and error.
func (s *Server) apiJobRun(c *gin.Context, r *request) error {
	run, err := s.jobRunParam(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, run)
	return nil
}
