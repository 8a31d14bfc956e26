package console

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/templates"
)

// findingsBulkStartPage is POST /reconcile/findings/bulk/start (operators): the preview's form —
// the filter, the findings picked, upto (the newest the preview saw), action, reason_code, note —
// starts the run and leads to its page. Refused (no reason, a reason not of the vocabulary, a
// note missing for "other", nothing left to act on), the preview page comes back with the form as
// typed and why, in the operator's language.
func (s *Server) findingsBulkStartPage(c *gin.Context, r *request) error {
	in, err := postedBulkInput(c)
	if err != nil {
		return err
	}
	runs, err := s.startFindingsBulk(c.Request.Context(), r.op, r.ip, in)
	if err != nil && len(runs) == 0 {
		status := statusOf(err)
		if status != http.StatusBadRequest && status != http.StatusConflict {
			return err
		}
		form := &templates.FindingForm{Action: in.Action, ReasonCode: in.ReasonCode, Note: in.Note,
			Error: pageMessage(c.Request.Context(), err), Field: errorField(err)}
		return s.renderBulkPreview(c, r, in, form, status)
	}
	if err != nil {
		return err // a cell refused after another's run started: the error names it
	}
	if len(runs) > 1 { // across cells, a run in each: the list shows them
		c.Redirect(http.StatusSeeOther, "/reconcile/findings/bulk")
		return nil
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reconcile/findings/bulk/%d", runs[0].ID))
	return nil
}
