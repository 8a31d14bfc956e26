package console

import (
	"context"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// findingsBulkRunsShown bounds the bulk runs list.
const findingsBulkRunsShown = 50

// findingsBulkRunPage is GET /reconcile/findings/bulk/{id}: the run, its progress (live while
// it runs: the page polls itself, htmx gets the progress alone), its results; a second operator
// approves or rejects it here.
func (s *Server) findingsBulkRunPage(c *gin.Context, r *request) error {
	run, err := s.bulkRunParam(c)
	if err != nil {
		return err
	}
	v := bulkRunView(run, r.op)
	v.Notice = bulkNotices[c.Query("notice")]
	if isHTMX(c) {
		s.render(c, http.StatusOK, templates.FindingsBulkRunProgress(chrome(r, "reconcile"), v))
		return nil
	}
	s.render(c, http.StatusOK, templates.FindingsBulkRunPage(chrome(r, "reconcile"), v))
	return nil
}

// bulkRunParam reads the bulk run of findings the route's {id} names, in the cell that has it
// (the route's scope check passed): the page and the API read a run alike.
func (s *Server) bulkRunParam(c *gin.Context) (*reconcile.BulkRun, error) {
	return paramIn(s, c, s.bulkRunIn)
}

var bulkNotices = map[string]string{"approved": "Approved: the run starts at the daemon's next poll.",
	"rejected": "Rejected: the run will not change anything."}

// findingsBulkRunsPage is GET /reconcile/findings/bulk (operators): the bulk runs op may see,
// those waiting for approval first.
func (s *Server) findingsBulkRunsPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	runs, err := s.visibleBulkRuns(ctx, r)
	if err != nil {
		return err
	}
	v := templates.FindingsBulkRunsView{}
	for _, b := range runs {
		v.Runs = append(v.Runs, bulkRunView(b, r.op))
	}
	s.render(c, http.StatusOK, templates.FindingsBulkRunsPage(chrome(r, "reconcile"), v))
	return nil
}

// apiFindingsBulkRun is GET /api/v1/reconcile/findings/bulk/{id}: the run as JSON.
func (s *Server) apiFindingsBulkRun(c *gin.Context, r *request) error {
	run, err := s.bulkRunParam(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, run)
	return nil
}

// visibleBulkRuns lists the recent bulk runs of findings r's operator may see (their findings'
// tenants within its own), waiting ones first, then newest first: every cell's, merged.
func (s *Server) visibleBulkRuns(ctx context.Context, r *request) ([]*reconcile.BulkRun, error) {
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) ([]*reconcile.BulkRun, error) {
		return c.recon.ListBulkRuns(ctx, findingsBulkRunsShown)
	})
	if err != nil {
		return nil, err
	}
	runs := got[0]
	if len(got) > 1 {
		runs = slices.Concat(got...)
		slices.SortStableFunc(runs, func(a, b *reconcile.BulkRun) int {
			if wa, wb := a.State == reconcile.BulkPendingApproval, b.State == reconcile.BulkPendingApproval; wa != wb {
				if wa {
					return -1
				}
				return 1
			}
			return b.CreatedAt.Compare(a.CreatedAt)
		})
		runs = runs[:min(len(runs), findingsBulkRunsShown)]
	}
	var out []*reconcile.BulkRun
	for _, b := range runs {
		if access.Decide(r.op, access.ObjFindingBulk, "", b.Tenants, false) == nil {
			out = append(out, b)
		}
	}
	return out, nil
}
