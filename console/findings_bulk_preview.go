package console

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// findingsBulkPreviewPage is POST /reconcile/findings/bulk (operators): the findings filter and
// the findings picked (scope=selected, id repeated) or all it matches (scope=all) in; the
// preview page out — how many, for how much, a sample — with the start form. Writes nothing.
func (s *Server) findingsBulkPreviewPage(c *gin.Context, r *request) error {
	in, err := postedBulkInput(c)
	if err != nil {
		return err
	}
	return s.renderBulkPreview(c, r, in, nil, http.StatusOK)
}

// postedBulkInput reads the bulk form posted to the preview and the start (bulkInputForm).
func postedBulkInput(c *gin.Context) (FindingsBulkInput, error) {
	if err := c.Request.ParseForm(); err != nil {
		return FindingsBulkInput{}, inputErr("form", "could not be read")
	}
	return bulkInputForm(c.Request.PostForm)
}

// renderBulkPreview previews in and renders the preview page, with form as typed when it is a
// refused start (status then 400 or 409).
func (s *Server) renderBulkPreview(c *gin.Context, r *request, in FindingsBulkInput, form *templates.FindingForm, status int) error {
	in.UpTo = 0 // the preview sees again what is there now
	p, upTo, err := s.previewFindingsBulk(c.Request.Context(), r.op, r.ip, in)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.bulkPreviewView(ctx, r, in, p, upTo, form)
	if err != nil {
		return err
	}
	s.render(c, status, templates.FindingsBulkPreviewPage(chrome(r, "reconcile"), v))
	return nil
}

// apiFindingsBulk is POST /api/v1/reconcile/findings/bulk (operators)
// {"filter": {...}, "ids": [..], "action": "ignore|resolve|recover", "reason_code": "...",
// "note": "...", "preview": true, "upto": N}: the filter takes the findings page's parameters
// (kind, channel, bill_date, run, key, order_no, currency, amount_min, amount_max); ids, when
// given, are findings picked from it. A preview answers 200 {"count": N, "amounts",
// "by_kind", "sample", "upto", "needs_approval", …} and writes nothing; otherwise the run starts
// (up to "upto" when given: what a preview saw) and answers 202 with it — state running, or
// pending_approval when a second operator must approve it.
func (s *Server) apiFindingsBulk(c *gin.Context, r *request) error {
	var b struct {
		Filter     map[string]any `json:"filter"`
		IDs        []int64        `json:"ids"`
		Action     string         `json:"action"`
		ReasonCode string         `json:"reason_code"`
		Note       string         `json:"note"`
		Preview    bool           `json:"preview"`
		UpTo       any            `json:"upto"` // an id, or across cells the preview's "a:12,b:1099511627790"
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	in := FindingsBulkInput{Filter: url.Values{}, IDs: b.IDs, Selected: b.IDs != nil, Action: b.Action, ReasonCode: b.ReasonCode,
		Note: b.Note}
	switch u := b.UpTo.(type) {
	case nil:
	case float64:
		if in.UpTo = int64(u); float64(in.UpTo) != u || u < 0 {
			return inputErr("upto", "is not a finding id")
		}
	case string:
		p, err := parseCellsPos(u)
		if err != nil {
			return inputErr("upto", "is not the newest findings a preview saw")
		}
		in.upToCells = p
	default:
		return inputErr("upto", "is not a finding id")
	}
	for k, v := range b.Filter {
		switch v := v.(type) {
		case string:
			in.Filter.Set(k, v)
		case float64:
			in.Filter.Set(k, fmt.Sprint(v))
		default:
			return inputErr("filter."+truncate(k, 40), "must be a string or a number")
		}
	}
	for k := range in.Filter {
		if !validFilterField(k) {
			return inputErr("filter."+truncate(k, 40), "is not a findings filter (kind, channel, bill_date, run, key, order_no, currency, amount_min, amount_max)")
		}
	}
	if len(in.IDs) > 1000 {
		return inputErr("ids", "at most 1000 findings picked by hand")
	}
	if b.Preview {
		p, upTo, err := s.previewFindingsBulk(c.Request.Context(), r.op, r.ip, in)
		if err != nil {
			return err
		}
		if upTo == nil {
			c.JSON(http.StatusOK, p)
			return nil
		}
		c.JSON(http.StatusOK, struct { // across cells: the newest finding seen in each
			*reconcile.BulkPreview
			UpTo string `json:"upto"`
		}{p, upTo.String()})
		return nil
	}
	runs, err := s.startFindingsBulk(c.Request.Context(), r.op, r.ip, in)
	if err != nil {
		return err
	}
	if len(runs) == 1 {
		c.JSON(http.StatusAccepted, runs[0])
		return nil
	}
	c.JSON(http.StatusAccepted, gin.H{"runs": runs}) // across cells: a run in each cell holding its findings
	return nil
}

// validFilterField says whether k is a findings filter parameter a bulk action takes.
func validFilterField(k string) bool {
	for _, f := range findingQueryFields {
		if f == k && f != "view" {
			return true
		}
	}
	return k == "state"
}
