package console

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
)

// attentionItem is one kind of thing that needs an operator: how many, and the list of them.
type attentionItem struct {
	Name  string // its JSON name
	Label string
	N     int64
	Href  string
	// Capped: there are more than N (a count of keys stopped at attention's upTo).
	Capped bool
}

// attention counts, in the operator's scope, what needs an operator now — the one count the
// dashboard's cards and GET /api/v1/dashboard share, "need attention" being their sum:
//   - open_findings: open reconciliation findings (the findings list's open count);
//   - failed_retryable: keys whose last attempt failed retryably, waiting for a retry;
//   - needs_recovery: keys flagged "needs attention" (downstream could not answer, a held
//     outcome);
//   - expired_leases: processing keys whose holder's lease lapsed (the reclaimer's backlog);
//   - failed_jobs: the daemon's schedules whose last run failed or timed out (a recon job
//     whose statement could not be fetched among them);
//   - bulk_awaiting_approval: bulk runs of findings waiting for a second operator.
//
// The counts of keys stop at upTo when it is not 0 (countKeys).
func (s *Server) attention(ctx context.Context, r *request, upTo int) ([]attentionItem, error) {
	scope := keyScope(r.op)
	var out []attentionItem
	add := func(name, label, href string, n int64) {
		out = append(out, attentionItem{Name: name, Label: label, N: n, Href: href})
	}
	addKeys := func(name, label, href string, b keys.Backlog) error {
		n, err := s.countKeys(ctx, scope, b, upTo)
		out = append(out, attentionItem{Name: name, Label: label, N: n.N, Href: href, Capped: n.Capped})
		return err
	}
	findings, err := s.findingStateCounts(ctx, r.op, reconcile.FindingFilter{})
	if err != nil {
		return nil, err
	}
	add("open_findings", "open findings", "/reconcile/findings?state=open", findings[reconcile.FindingOpen])
	if err := addKeys("failed_retryable", "failed retryable", "/keys?state=failed_retryable", keys.InState(claim.StateFailedRetryable)); err != nil {
		return nil, err
	}
	if err := addKeys("needs_recovery", "keys needing recovery", "/keys?attention=1", keys.NeedsAttention); err != nil {
		return nil, err
	}
	if err := addKeys("expired_leases", "expired leases", "/keys?state=processing", keys.ExpiredLeases); err != nil {
		return nil, err
	}
	failed := int64(0)
	installed, err := daemon.Installed(ctx, s.db)
	if err != nil {
		return nil, err
	}
	if s.cells.cells != nil { // every cell's daemon: its schedules whose last run failed
		if failed, err = s.failedSchedulesIn(ctx, r.op); err != nil {
			return nil, err
		}
		installed = false
	}
	if installed {
		schedules, err := s.visibleSchedules(ctx, r.op)
		if err != nil {
			return nil, err
		}
		for _, sc := range schedules {
			if sc.LastRun != nil && (sc.LastRun.Status == daemon.RunFailed || sc.LastRun.Status == daemon.RunTimedOut) {
				failed++
			}
		}
	}
	add("failed_jobs", "failed jobs", "/jobs?status=failed", failed)
	waiting := int64(0)
	if bulk, err := s.visibleBulkRuns(ctx, r); err != nil {
		return nil, err
	} else {
		for _, b := range bulk {
			if b.State == reconcile.BulkPendingApproval {
				waiting++
			}
		}
	}
	add("bulk_awaiting_approval", "bulk runs awaiting approval", "/reconcile/findings/bulk", waiting)
	return out, nil
}

// apiDashboard is GET /api/v1/dashboard: {"attention": {"open_findings": N, "failed_retryable": N,
// "needs_recovery": N, "expired_leases": N, "failed_jobs": N, "bulk_awaiting_approval": N},
// "need_attention": their sum, "open_keys": {"processing": N, "failed_retryable": N}}, in the
// caller's scope.
func (s *Server) apiDashboard(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx)
	att, err := s.attention(ctx, r, 0) // exact: the API's figures are not capped
	if err != nil {
		return err
	}
	m, total := map[string]int64{}, int64(0)
	for _, a := range att {
		m[a.Name], total = a.N, total+a.N
	}
	processing, err := s.countKeys(ctx, keyScope(r.op), keys.InState(claim.StateProcessing), 0)
	if err != nil {
		return err
	}
	open := map[string]int64{string(claim.StateProcessing): processing.N, string(claim.StateFailedRetryable): m["failed_retryable"]}
	out := gin.H{"attention": m, "need_attention": total, "open_keys": open}
	if gone := missed.list(); len(gone) > 0 {
		out["cells_unavailable"] = gone // their figures are left out of every count
	}
	c.JSON(http.StatusOK, out)
	return nil
}
