package console

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/retention"
	"github.com/idemops/idemops/templates"
)

var retentionNotices = map[string]string{
	"saved":   "Policy saved. The next purge re-stamps existing keys under it.",
	"deleted": "Policy deleted.",
	"floor":   "Floor saved.",
}

// purgeHistoryShown is how many purge runs one page of history lists.
const purgeHistoryShown = 20

func retentionStates() []string {
	out := make([]string, len(retention.PolicyStates))
	for i, s := range retention.PolicyStates {
		out[i] = string(s)
	}
	return out
}

func floorForm(f retention.Floor) templates.FloorForm {
	return templates.FloorForm{ClientRetry: retention.FormatPeriod(f.ClientRetry), Backfill: retention.FormatPeriod(f.Backfill),
		ReconciliationLag: retention.FormatPeriod(f.ReconciliationLag)}
}

// retentionView reads the policies, the floor and one page of purge history (before: keyset).
func (s *Server) retentionView(ctx context.Context, r *request, before int64) (templates.RetentionView, error) {
	v := templates.RetentionView{States: retentionStates(), CanEdit: r.op.Role >= access.RoleAdmin,
		Form: templates.PolicyForm{Operation: retention.AllOperations, State: string(claim.StateCompleted)}}
	set, err := retention.ListPolicies(ctx, s.db)
	if err != nil {
		return v, err
	}
	f := set.Floor
	v.Floor = templates.FloorView{Total: f.Total(), ClientRetry: f.ClientRetry, Backfill: f.Backfill,
		ReconciliationLag: f.ReconciliationLag, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt}
	v.FloorForm = floorForm(f)
	for _, p := range set.Policies {
		v.Policies = append(v.Policies, templates.PolicyRow{Operation: p.Operation, State: string(p.State),
			KeepResponse: p.KeepResponse, KeepKey: p.KeepKey, UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt})
	}
	if !r.op.SeesAllTenants() {
		return v, nil // the purge history counts every tenant's keys
	}
	runs, err := retention.PurgeHistory(ctx, s.db, before, purgeHistoryShown+1)
	if err != nil {
		return v, err
	}
	if len(runs) > purgeHistoryShown {
		runs = runs[:purgeHistoryShown]
		v.HistoryNext = "/retention?before=" + strconv.FormatInt(runs[len(runs)-1].ID, 10)
	}
	for _, p := range runs {
		v.History = append(v.History, templates.PurgeRow{ID: p.ID, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
			DryRun: p.DryRun, Actor: p.Actor, Operation: p.Operation, Status: p.Status, Deleted: p.Deleted,
			Tombstoned: p.Tombstoned, Restamped: p.Restamped, Timeouts: p.Timeouts, BatchSize: p.BatchSize,
			Error: truncate(p.Error, 200)})
	}
	return v, nil
}

func parseBefore(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, inputErr("before", "is not a page cursor")
	}
	return n, nil
}

// retentionPage is GET /retention.
func (s *Server) retentionPage(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.retentionView(ctx, r, before)
	if err != nil {
		return err
	}
	v.Notice = retentionNotices[c.Query("notice")]
	s.render(c, http.StatusOK, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

type apiPolicy struct {
	Operation    string    `json:"operation"`
	State        string    `json:"state"`
	KeepResponse string    `json:"keep_response"`
	KeepKey      string    `json:"keep_key"`
	UpdatedBy    string    `json:"updated_by,omitempty"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
}

// apiPolicies is GET /api/v1/retention/policies: the floor (and its parts) and every policy.
func (s *Server) apiPolicies(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	set, err := retention.ListPolicies(ctx, s.db)
	if err != nil {
		return err
	}
	f := set.Floor
	ps := []apiPolicy{}
	for _, p := range set.Policies {
		ps = append(ps, apiPolicy{Operation: p.Operation, State: string(p.State), KeepResponse: retention.FormatPeriod(p.KeepResponse),
			KeepKey: retention.FormatPeriod(p.KeepKey), UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt})
	}
	c.JSON(http.StatusOK, gin.H{"floor": gin.H{"total": retention.FormatPeriod(f.Total()),
		"client_retry": retention.FormatPeriod(f.ClientRetry), "backfill": retention.FormatPeriod(f.Backfill),
		"reconciliation_lag": retention.FormatPeriod(f.ReconciliationLag)}, "policies": ps})
	return nil
}

// apiPurges is GET /api/v1/retention/purges?before=ID&limit=N: purge history, newest first.
func (s *Server) apiPurges(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	limit := 50
	if l := c.Query("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > retention.MaxHistory {
			return inputErr("limit", "must be between 1 and %d", retention.MaxHistory)
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.authorize(ctx, r, "retention.purges", access.ObjPolicy, "purge"); err != nil {
		return err
	}
	runs, err := retention.PurgeHistory(ctx, s.db, before, limit)
	if err != nil {
		return err
	}
	out := gin.H{"purges": runs, "next_before": nil}
	if runs == nil {
		out["purges"] = []retention.PurgeRun{}
	}
	if len(runs) == limit {
		out["next_before"] = runs[len(runs)-1].ID
	}
	c.JSON(http.StatusOK, out)
	return nil
}
