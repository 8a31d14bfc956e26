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

// listedPurge is a purge run as the history lists it, with the cell whose daemon ran it ("" with
// one database).
type listedPurge struct {
	retention.PurgeRun
	Cell string `json:"cell,omitempty"`
}

// purgeHistory is one page of purge history (pageAcrossCells): each cell's daemon purges its own
// keys and logs it in its own purge_log, so across cells every cell's runs are listed, merged by
// (started_at, id).
func (s *Server) purgeHistory(ctx context.Context, before string, read, shown int) ([]listedPurge, string, error) {
	return pageAcrossCells(ctx, s.cells, before, read, shown, retention.MaxHistory,
		func(ctx context.Context, c scopedCell, beforeID int64, limit int) ([]listedPurge, error) {
			runs, err := retention.PurgeHistory(ctx, c.db, beforeID, limit)
			out := make([]listedPurge, len(runs))
			for i, p := range runs {
				out[i] = listedPurge{p, c.name}
			}
			return out, err
		},
		func(a, b *listedPurge) bool {
			return a.StartedAt.After(b.StartedAt) || a.StartedAt.Equal(b.StartedAt) && a.ID > b.ID
		},
		func(p *listedPurge) int64 { return p.ID })
}

// retentionView reads the policies, the floor and one page of purge history (before: the
// page's cursor, checked by parseCursor).
func (s *Server) retentionView(ctx context.Context, r *request, before string) (templates.RetentionView, error) {
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
	runs, next, err := s.purgeHistory(ctx, before, purgeHistoryShown+1, purgeHistoryShown)
	if err != nil {
		return v, err
	}
	if next != "" {
		v.HistoryNext = "/retention?before=" + next
	}
	for _, p := range runs {
		v.History = append(v.History, templates.PurgeRow{ID: p.ID, Cell: p.Cell, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
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

// retentionPage is GET /retention?before=CURSOR (the purge history's: an id, or across cells a
// position in each). Across cells a cell that does not answer is left out and named.
func (s *Server) retentionPage(c *gin.Context, r *request) error {
	before := c.Query("before")
	if _, _, err := parseCursor(before); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' purges, and its name
	v, err := s.retentionView(ctx, r, before)
	if err != nil {
		return err
	}
	v.Notice, v.Unavailable = retentionNotices[c.Query("notice")], missed.list()
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

// apiPurges is GET /api/v1/retention/purges?before=CURSOR&limit=N: purge history, newest first.
// Across cells each run names its cell and next_before is a position in each cell (a string;
// one database: the id, as it always was).
func (s *Server) apiPurges(c *gin.Context, r *request) error {
	before := c.Query("before")
	if _, _, err := parseCursor(before); err != nil {
		return err
	}
	limit := 50
	if l := c.Query("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > retention.MaxHistory {
			return inputErr("limit", "must be between 1 and %d", retention.MaxHistory)
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.authorize(ctx, r, "retention.purges", access.ObjPolicy, "purge"); err != nil {
		return err
	}
	runs, next, err := s.purgeHistory(ctx, before, limit, limit)
	if err != nil {
		return err
	}
	out := gin.H{"purges": runs, "next_before": nil}
	if len(runs) == 0 {
		out["purges"] = []listedPurge{}
	}
	if id, err := strconv.ParseInt(next, 10, 64); err == nil {
		out["next_before"] = id // one database: the id
	} else if next != "" {
		out["next_before"] = next
	}
	c.JSON(http.StatusOK, out)
	return nil
}
