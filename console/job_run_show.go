package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
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
	notFound := fmt.Errorf("job run %d: %w", id, ErrNotFound)
	if s.cells.cells != nil { // each cell's daemon keeps its runs: the cell that has it answers
		run, _, err := stayIn(ctx, s.cells, func(ctx context.Context, c *cell) (*daemon.Run, error) {
			run, err := daemon.GetRun(ctx, c.db, id)
			if errors.Is(err, daemon.ErrUnknownRun) {
				return nil, notFound
			}
			return run, err
		}, notFound)
		return run, err
	}
	run, err := daemon.GetRun(ctx, s.db, id)
	if errors.Is(err, daemon.ErrUnknownRun) {
		return nil, notFound
	}
	return run, err
}

// runError is a job run's error as a phrase for the page: its own phrase when the job's error
// carried one; else the stored text when the catalog has it whole (the daemon's own fixed
// texts: a run left by an earlier leader, one stopped before its pass was complete); else "the
// run failed" with the text after it as data (an error from below, in its own words). Zero when
// the run has no error.
func runError(r daemon.Run) errs.Phrase {
	switch {
	case r.ErrorPhrase.Valid:
		return r.ErrorPhrase.Phrase
	case r.Error == "":
		return errs.Phrase{}
	case templates.HasMessage(r.Error):
		return errs.Verbatim(r.Error)
	}
	return errs.Phrasef("The run failed: %s", truncate(r.Error, 300))
}

// jobRunPage is GET /jobs/runs/:id: one run with its progress, timings, stats and error.
func (s *Server) jobRunPage(c *gin.Context, r *request) error {
	run, err := s.jobRunParam(c)
	if err != nil {
		return err
	}
	row := jobRunRow(*run)
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
