package console

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
)

// findingsBulkDecidePage is POST /reconcile/findings/bulk/{id}/{approve,reject} (operators who
// cover the run's findings, not the one who started it): four eyes. Back to the run's page.
func (s *Server) findingsBulkDecidePage(approve bool) func(c *gin.Context, r *request) error {
	notice := map[bool]string{true: "approved", false: "rejected"}[approve]
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		if _, err := s.decideFindingsBulk(c.Request.Context(), r.op, r.ip, id, approve); err != nil {
			return err
		}
		c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reconcile/findings/bulk/%d?notice=%s", id, notice))
		return nil
	}
}

// apiFindingsBulkDecide is POST /api/v1/reconcile/findings/bulk/{id}/{approve,reject}: the run
// as it is now.
func (s *Server) apiFindingsBulkDecide(approve bool) func(c *gin.Context, r *request) error {
	return func(c *gin.Context, r *request) error {
		id, err := parseID(c.Param("id"))
		if err != nil {
			return err
		}
		run, err := s.decideFindingsBulk(c.Request.Context(), r.op, r.ip, id, approve)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, run)
		return nil
	}
}
