package console

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/templates"
)

// reconLinePage is GET /reconcile/runs/{id}/line?n=N: one line of the run's statement as the
// channel stated it, linked to the key it matched and back to the run's findings. The run is
// scope-checked by the route table (a run of a channel account the operator does not cover is
// not found); the line is read by the run's own statement id.
func (s *Server) reconLinePage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(c.Query("n"))
	if err != nil || n < 1 {
		return inputErr("n", "must be a line number (1 or more)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, rc, err := s.runIn(ctx, id) // the run and its statement are in the cell that matched it
	if err != nil {
		return err
	}
	if run.StatementID == nil {
		return fmt.Errorf("run %d has no statement: %w", id, ErrNotFound)
	}
	l, err := rc.recon.StoredLine(ctx, *run.StatementID, n)
	if err != nil {
		return err
	}
	v := templates.ReconLineView{RunID: id, RunHref: fmt.Sprintf("/reconcile/runs/%d", id), StatementID: *run.StatementID,
		FindingsHref: fmt.Sprintf("/reconcile/findings?run=%d", id), Line: l.LineNo, ChannelTxnID: l.ChannelTxnID,
		MerchantOrderNo: l.MerchantOrderNo, Amount: money.Display(l.AmountMinor, l.Currency), Status: l.Status,
		OccurredAt: l.OccurredAt, Raw: l.Raw}
	if l.KeyID != nil {
		names, err := s.keyNames(ctx, r.op, []int64{*l.KeyID})
		if err != nil {
			return err
		}
		if name := names[*l.KeyID]; name.Key != "" { // a key the operator may see
			v.Key, v.FindingsHref = &name, fmt.Sprintf("/reconcile/findings?key=%d", *l.KeyID)
		}
	}
	s.render(c, http.StatusOK, templates.ReconLinePage(chrome(r, "reconcile"), v))
	return nil
}
