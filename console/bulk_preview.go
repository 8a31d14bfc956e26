package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// previewBulk previews a bulk replay of the keys picked (ids) or the search f (POST
// /replays/bulk, POST /api/v1/replays/bulk). It writes nothing.
func (s *Server) previewBulk(c *gin.Context, r *request, f KeyFilter, ids []int64) (*replay.BulkPlan, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+s.cfg.BulkPreviewTimeout)
	defer cancel()
	ch, err := s.bulkKeys(ctx, r.op, f, ids)
	if err != nil {
		return nil, err
	}
	return s.previewBulkIn(ctx, actorOf(r), ch)
}

// bulkFilter reads the key search of a bulk replay from form or JSON values.
func bulkFilter(q url.Values) (KeyFilter, error) {
	q.Del("after")
	q.Del("limit")
	return ParseKeyFilter(q)
}

// bulkFilterFields are the key search's filters a bulk preview form carries.
var bulkFilterFields = []string{"tenant", "operation", "state", "from", "to", "digest", "field", "value", "attention", "unresolved"}

// bulkSelection reads a bulk preview's form: the search's filters, and the keys picked on the
// search page (id, repeated) unless scope=all asks for everything the filter matches.
func (s *Server) bulkSelection(form url.Values) (KeyFilter, []int64, error) {
	q := url.Values{}
	for _, k := range bulkFilterFields {
		if v := form.Get(k); v != "" {
			q.Set(k, v)
		}
	}
	f, err := bulkFilter(q)
	if err != nil {
		return f, nil, err
	}
	if form.Get("scope") == "all" {
		return f, nil, nil
	}
	raw := form["id"]
	if len(raw) > s.cfg.BulkCap {
		return f, nil, inputErr("id", "%d keys selected; a bulk replay takes at most %d", len(raw), s.cfg.BulkCap)
	}
	if form.Get("scope") == "selected" && len(raw) == 0 {
		return f, nil, inputErr("id", "no key selected: tick the keys to replay, or take every key matching the filter")
	}
	ids := make([]int64, 0, len(raw))
	for _, v := range raw {
		id, err := parseID(v)
		if err != nil {
			return f, nil, inputErr("id", "%q is not a key id", truncate(v, 20))
		}
		ids = append(ids, id)
	}
	return f, ids, nil
}

// bulkPreviewPage is POST /replays/bulk: the search's filters (and the keys picked) in, the
// preview page out, with the start form carrying the selection under its HMAC. Writes nothing.
func (s *Server) bulkPreviewPage(c *gin.Context, r *request) error {
	if err := c.Request.ParseForm(); err != nil {
		return inputErr("form", "could not be read")
	}
	f, ids, err := s.bulkSelection(c.Request.PostForm)
	if err != nil {
		return err
	}
	p, err := s.previewBulk(c, r, f, ids)
	if err != nil {
		return err
	}
	v := s.bulkPlanView(c.Request.Context(), p, r.op)
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.nameBulkItems(ctx, r.op, v.Items); err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.BulkPage(chrome(r, "replays"), v))
	return nil
}

// bulkPlanView is the preview page of a plan: counts, keys, and the start form.
func (s *Server) bulkPlanView(ctx context.Context, p *replay.BulkPlan, op *access.Operator) templates.BulkView {
	v := templates.BulkView{Preview: true, StartHref: "/replays/bulk/start", FilterHref: "/keys?" + p.Filter,
		Filter: p.Filter, State: "preview", Operator: op.Name, Total: p.Total, Capped: p.Capped, Cap: s.cfg.BulkCap,
		Selected: p.Selected, Plan: p.Plan, Token: p.Token, Expires: p.Expires}
	v.ByState, v.ByOutcome = counts(p.Counts.ByState, nil), counts(p.Counts.ByOutcome, predictionLabels)
	if p.AllRefused() {
		v.NoneReplayable = errs.Phrasef("Nothing to start: a guard refuses all %d keys of this selection (their states or live leases, listed below). Change the search or the selection.", p.Total)
	}
	for _, it := range p.Items {
		v.Items = append(v.Items, templates.BulkItemRow{Seq: it.Seq, KeyID: it.KeyID, KeyHref: fmt.Sprintf("/keys/%d", it.KeyID),
			KeyState: it.KeyState, KeyVersion: it.KeyVersion, Predicted: predictionLabels[it.Predicted]})
	}
	return v
}

// apiBulkPreview is POST /api/v1/replays/bulk {"filter": {"state": "failed_retryable", ...}, "ids": [..]}:
// the key search's filters (as on GET /api/v1/keys), or the keys picked by id; 200 with the
// preview (keys, versions, predictions, counts) and the plan and token that start it. Writes nothing.
func (s *Server) apiBulkPreview(c *gin.Context, r *request) error {
	var b struct {
		Filter map[string]string `json:"filter"`
		IDs    []int64           `json:"ids"`
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range b.Filter {
		q.Set(k, v)
	}
	f, err := bulkFilter(q)
	if err != nil {
		return err
	}
	if len(b.IDs) > s.cfg.BulkCap {
		return inputErr("ids", "%d keys selected; a bulk replay takes at most %d", len(b.IDs), s.cfg.BulkCap)
	}
	p, err := s.previewBulk(c, r, f, b.IDs)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, p)
	return nil
}
