package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// getBulkRun reads a run; only the operator who started it sees it (its keys are within their
// tenants, not necessarily within another operator's), and only while their tenants still cover
// its keys' (scope.go).
func (s *Server) getBulkRun(ctx context.Context, op *access.Operator, id int64) (*replay.BulkRun, *cell, error) {
	if err := s.scopeCheck(ctx, op, access.ObjBulkRun, strconv.FormatInt(id, 10), false); err != nil {
		return nil, nil, err
	}
	var run *replay.BulkRun
	var c *cell
	var err error
	if s.cells.cells == nil {
		run, err = s.replays.BulkRun(ctx, id)
		c = s.cells.all[0]
	} else { // with cells, the run is in the cell its keys were in
		run, c, err = stayIn(ctx, s.cells, func(ctx context.Context, c *cell) (*replay.BulkRun, error) { return c.replays.BulkRun(ctx, id) },
			fmt.Errorf("bulk run %d: %w", id, ErrNotFound))
	}
	if err != nil {
		return nil, nil, err
	}
	if run.OperatorID != op.ID {
		return nil, nil, fmt.Errorf("bulk run %d: %w", id, ErrNotFound)
	}
	return run, c, nil
}

// bulkParam reads the run named by {id} and its items (GET /replays/bulk/{id}[/progress], GET
// /api/v1/replays/bulk/{id}).
func (s *Server) bulkParam(ctx context.Context, c *gin.Context, r *request) (*replay.BulkRun, []replay.BulkItem, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, nil, err
	}
	run, rc, err := s.getBulkRun(ctx, r.op, id)
	if err != nil {
		return nil, nil, err
	}
	items, err := rc.replays.BulkItems(ctx, id)
	return run, items, err
}

func (s *Server) bulkView(ctx context.Context, run *replay.BulkRun, items []replay.BulkItem) templates.BulkView {
	v := templates.BulkView{ID: run.ID, Href: fmt.Sprintf("/replays/bulk/%d", run.ID),
		ProgressHref: fmt.Sprintf("/replays/bulk/%d/progress", run.ID),
		FilterHref:   "/keys?" + run.Filter, Filter: run.Filter, State: run.State, Operator: run.Operator,
		Total: run.Total, Processed: run.Processed, Capped: run.Capped, Cap: s.cfg.BulkCap}
	if run.Reason != nil {
		v.Reason = *run.Reason
	}
	if run.RecheckAt != nil {
		v.RecheckAt = *run.RecheckAt
	}
	if run.Error != nil {
		v.Error = say(ctx, "The run stopped: %s", *run.Error)
	}
	var bc replay.BulkCounts
	_ = json.Unmarshal(run.Counts, &bc)
	v.ByState, v.ByOutcome = counts(bc.ByState, nil), counts(bc.ByOutcome, predictionLabels)
	var results map[string]int
	_ = json.Unmarshal(run.Results, &results)
	v.Results = counts(results, resultLabels)
	for _, it := range items {
		row := templates.BulkItemRow{Seq: it.Seq, KeyID: it.KeyID, KeyHref: fmt.Sprintf("/keys/%d", it.KeyID),
			KeyState: it.KeyState, KeyVersion: it.KeyVersion, Predicted: predictionLabels[it.Predicted]}
		if it.Result != nil {
			row.Result = *it.Result
			if label := resultLabels[*it.Result]; label != "" {
				row.Result = label
			}
		}
		row.Detail = storedPhrase(it.DetailPhrase, it.Detail)
		if it.RequestID != nil {
			row.RequestHref = fmt.Sprintf("/replays/%d", *it.RequestID)
		}
		if row.Parked, row.Checks = it.Parked(), it.Checks; it.RecheckAt != nil {
			row.RecheckAt = *it.RecheckAt
		}
		if row.Parked {
			v.Parked++
		}
		v.Items = append(v.Items, row)
	}
	return v
}

// bulkPage is GET /replays/bulk/{id}; ?with=ID,… names the other runs of the same bulk
// replay (one per cell), linked when they are runs op may open.
func (s *Server) bulkPage(c *gin.Context, r *request) error {
	v, err := s.loadBulkView(c, r)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	most := len(s.cells.everywhere()) // a run per cell at most
	for i, raw := range strings.Split(c.Query("with"), ",") {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || i >= most || id == v.ID {
			continue
		}
		if _, _, err := s.getBulkRun(ctx, r.op, id); err == nil {
			v.With = append(v.With, templates.RunLink{ID: id, Href: fmt.Sprintf("/replays/bulk/%d", id)})
		}
	}
	s.render(c, http.StatusOK, templates.BulkPage(chrome(r, "replays"), v))
	return nil
}

// bulkProgress is GET /replays/bulk/{id}/progress: the partial the page polls while it runs.
func (s *Server) bulkProgress(c *gin.Context, r *request) error {
	v, err := s.loadBulkView(c, r)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.BulkProgress(v))
	return nil
}

func (s *Server) loadBulkView(c *gin.Context, r *request) (templates.BulkView, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, items, err := s.bulkParam(ctx, c, r)
	if err != nil {
		return templates.BulkView{}, err
	}
	v := s.bulkView(ctx, run, items)
	return v, s.nameBulkItems(ctx, r.op, v.Items)
}

// apiBulk is GET /api/v1/replays/bulk/{id}: the run, its progress and its per-key results.
func (s *Server) apiBulk(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, items, err := s.bulkParam(ctx, c, r)
	if err != nil {
		return err
	}
	if items == nil {
		items = []replay.BulkItem{}
	}
	c.JSON(http.StatusOK, gin.H{"run": run, "items": items})
	return nil
}
