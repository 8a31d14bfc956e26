package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/templates"
)

// predictionLabels name a preview's predictions; resultLabels what a replay did.
var predictionLabels = map[string]string{
	string(PredictRefused):        "refused by a guard",
	string(PredictRecorded):       "already at the channel: recorded, nothing sent",
	string(PredictRecordedFailed): "already at the channel, failed: recorded as failed",
	string(PredictSend):           "not found twice: sent now",
	string(PredictNotFoundOnce):   "not found once: parked for the quarantine, then re-checked",
	string(PredictLookupError):    "downstream could not answer: parked",
}

var resultLabels = map[string]string{
	"recorded":         "recorded, nothing sent",
	"sent":             "sent",
	"failed":           "failed",
	"not_found_once":   "not found once: parked for the quarantine",
	"lookup_error":     "downstream could not answer: parked",
	"pending_approval": "waiting for a second operator",
	"refused":          "refused by a guard",
	"error":            "error (logged)",
}

func counts(m map[string]int, labels map[string]string) []templates.Count {
	out := make([]templates.Count, 0, len(m))
	for k, n := range m {
		label := labels[k]
		if label == "" {
			label = k
		}
		out = append(out, templates.Count{Label: label, N: int64(n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N || out[i].N == out[j].N && out[i].Label < out[j].Label })
	return out
}

func (s *Server) replayRow(r *ReplayRequest, op *Operator) templates.ReplayRow {
	row := templates.ReplayRow{ID: r.ID, Href: fmt.Sprintf("/replays/%d", r.ID), KeyID: r.KeyID,
		KeyHref: fmt.Sprintf("/keys/%d", r.KeyID), Tenant: r.Tenant, DigestShort: r.KeyDigest[:12], Requester: r.Requester,
		Reason: r.Reason, Action: r.Preview, State: r.State, NeedsApproval: r.NeedsApproval, CreatedAt: r.CreatedAt,
		CanApprove: r.State == "pending" && op.Role >= RoleOperator && op.ID != r.RequestedBy}
	if r.Approver != nil {
		row.Approver = *r.Approver
	}
	if r.OutcomeKind != nil {
		row.OutcomeKind = *r.OutcomeKind
	}
	if r.Outcome != nil {
		row.Outcome = *r.Outcome
	}
	if r.State == "pending" {
		row.Outcome = "waiting for a second operator's approval"
	}
	if r.BulkRunID != nil {
		row.BulkHref = fmt.Sprintf("/replays/bulk/%d", *r.BulkRunID)
	}
	return row
}

// replayPreviewView builds the preview page of a key for r.
func (s *Server) replayPreviewView(ctx context.Context, r *request, k *claim.Key) (templates.ReplayPreviewView, error) {
	p := s.previewReplay(ctx, r.op, k)
	v := templates.ReplayPreviewView{Key: k, Preview: templates.ReplayPreviewData{Allowed: p.Allowed, Outcome: string(p.Outcome),
		Text: p.Text, Action: p.Action, Amount: p.Amount, NeedsApproval: p.NeedsApproval, Token: p.Token}}
	if r.op.Role >= RoleAdmin && k.Replayable() {
		v.CanMarkFinal, v.FinalToken = true, s.confirmToken(actionFinal, r.op, k.ID, k.Version)
		v.ReleaseToken = s.confirmToken(actionRelease, r.op, k.ID, k.Version)
	}
	var prior []ReplayRequest
	if err := s.db.WithContext(ctx).Raw(`SELECT `+replayColumns+` FROM replay_requests WHERE key_id = ? ORDER BY id DESC LIMIT 20`,
		k.ID).Scan(&prior).Error; err != nil {
		return v, fmt.Errorf("replays of key %d: %w", k.ID, err)
	}
	for i := range prior {
		v.Requests = append(v.Requests, s.replayRow(&prior[i], r.op))
	}
	return v, s.nameReplayRows(ctx, r.op, v.Requests)
}

// replayPreview is GET /keys/{id}/replay: the read-only preview and the confirmation form.
func (s *Server) replayPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	v, err := s.replayPreviewView(ctx, r, k)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.ReplayPreviewPage(chrome(r, "keys"), v))
	return nil
}

// confirmReplay is POST /keys/{id}/replay: the confirmation. It redirects to the request's page
// (a second submit of the same confirmation lands on the same request); a refusal shows the
// preview again with the reason.
func (s *Server) confirmReplay(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	req, _, err := s.confirm(c, r, id, c.PostForm("token"), c.PostForm("reason"))
	var re *RefusedError
	if errors.As(err, &re) || errors.Is(err, ErrInvalidInput) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
		defer cancel()
		k, kerr := s.getKey(ctx, r.op, id)
		if kerr != nil {
			return kerr
		}
		v, verr := s.replayPreviewView(ctx, r, k)
		if verr != nil {
			return verr
		}
		v.Error, v.Reason = publicMessage(err), c.PostForm("reason")
		s.render(c, statusOf(err), templates.ReplayPreviewPage(chrome(r, "keys"), v))
		return nil
	}
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", req.ID))
	return nil
}

// confirm is the confirmation shared by the page and the API.
func (s *Server) confirm(c *gin.Context, r *request, keyID int64, token, reason string) (*ReplayRequest, bool, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	k, err := s.getKey(ctx, r.op, keyID)
	if err != nil {
		return nil, false, err
	}
	version, err := s.checkToken(actionReplay, r.op, keyID, token)
	if err != nil {
		return nil, false, err
	}
	if reason, err = checkReason(reason); err != nil {
		return nil, false, err
	}
	return s.requestReplay(ctx, replayAsk{op: r.op, ip: r.ip, key: k, version: version,
		token: tokenHash(actionReplay, token), reason: reason})
}

// replayPage is GET /replays/{id}.
func (s *Server) replayPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	req, err := s.getReplay(ctx, r.op, id)
	if err != nil {
		return err
	}
	row := s.replayRow(req, r.op)
	if req.State == "executing" {
		row.Waiting = s.replayWaiting(ctx, req.KeyID)
	}
	one := []templates.ReplayRow{row}
	if err := s.nameReplayRows(ctx, r.op, one); err != nil {
		return err
	}
	row = one[0]
	s.render(c, http.StatusOK, templates.ReplayPage(chrome(r, "replays"), templates.ReplayView{Req: row}))
	return nil
}

// replayWaiting says what an executing replay is doing: waiting out the quarantine (with the
// time it looks again and a countdown) or running.
func (s *Server) replayWaiting(ctx context.Context, keyID int64) string {
	k, err := s.claims.Get(ctx, keyID)
	if err != nil || k.NotFoundAt == nil {
		return "The replay is running."
	}
	at := k.NotFoundAt.Add(s.claims.Config().Quarantine)
	left := max(time.Until(at).Round(time.Second), 0)
	return fmt.Sprintf("Downstream said not found at %s. This replay holds the key and looks again at %s (in %s), "+
		"then sends or records what it finds; no second confirmation is needed.",
		k.NotFoundAt.UTC().Format("15:04:05 UTC"), at.UTC().Format("15:04:05 UTC"), left)
}

// replaysPage is GET /replays: pending approvals and recent requests.
func (s *Server) replaysPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := s.listReplays(ctx, r.op, 50)
	if err != nil {
		return err
	}
	var v templates.ReplaysView
	for i := range rows {
		row := s.replayRow(&rows[i], r.op)
		if rows[i].State == "pending" {
			v.Pending = append(v.Pending, row)
		} else {
			v.Recent = append(v.Recent, row)
		}
	}
	if err := s.nameReplayRows(ctx, r.op, v.Pending); err != nil {
		return err
	}
	if err := s.nameReplayRows(ctx, r.op, v.Recent); err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.ReplaysPage(chrome(r, "replays"), v))
	return nil
}

// approveReplayPage is POST /replays/{id}/approve.
func (s *Server) approveReplayPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	if _, err := s.approveReplay(ctx, r.op, r.ip, id); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", id))
	return nil
}

// markFinalPage is POST /keys/{id}/final (administrators).
func (s *Server) markFinalPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.markFinal(ctx, r.op, r.ip, id, c.PostForm("token"), c.PostForm("reason")); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", id))
	return nil
}

// releasePage is POST /keys/{id}/release (administrators).
func (s *Server) releasePage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.releaseForRetry(ctx, r.op, r.ip, id, c.PostForm("token"), c.PostForm("reason")); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", id))
	return nil
}

// bulkFilter reads the key search of a bulk replay from form or JSON values.
func bulkFilter(q url.Values) (KeyFilter, error) {
	q.Del("after")
	q.Del("limit")
	return ParseKeyFilter(q)
}

// bulkFilterFields are the key search's filters a bulk preview form carries.
var bulkFilterFields = []string{"tenant", "operation", "state", "from", "to", "digest", "field", "value", "attention"}

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
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+s.cfg.BulkPreviewTimeout)
	defer cancel()
	p, err := s.previewBulk(ctx, r.op, f, ids)
	if err != nil {
		return err
	}
	v := s.bulkPlanView(p, r.op)
	if err := s.nameBulkItems(ctx, r.op, v.Items); err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.BulkPage(chrome(r, "replays"), v))
	return nil
}

// bulkPlanView is the preview page of a plan: counts, keys, and the start form.
func (s *Server) bulkPlanView(p *BulkPlan, op *Operator) templates.BulkView {
	v := templates.BulkView{Preview: true, StartHref: "/replays/bulk/start", FilterHref: "/keys?" + p.Filter,
		Filter: p.Filter, State: "preview", Operator: op.Name, Total: p.Total, Capped: p.Capped, Cap: s.cfg.BulkCap,
		Selected: p.Selected, Plan: p.Plan, Token: p.Token, Expires: p.Expires}
	v.ByState, v.ByOutcome = counts(p.Counts.ByState, nil), counts(p.Counts.ByOutcome, predictionLabels)
	if p.allRefused() {
		v.NoneReplayable = fmt.Sprintf("Nothing to start: a guard refuses all %d keys of this selection (their states or live leases, listed below). Change the search or the selection.", p.Total)
	}
	for _, it := range p.Items {
		v.Items = append(v.Items, templates.BulkItemRow{Seq: it.Seq, KeyID: it.KeyID, KeyHref: fmt.Sprintf("/keys/%d", it.KeyID),
			KeyState: it.KeyState, KeyVersion: it.KeyVersion, Predicted: predictionLabels[it.Predicted]})
	}
	return v
}

func (s *Server) bulkView(ctx context.Context, run *BulkRun) (templates.BulkView, error) {
	v := templates.BulkView{ID: run.ID, Href: fmt.Sprintf("/replays/bulk/%d", run.ID),
		ProgressHref: fmt.Sprintf("/replays/bulk/%d/progress", run.ID),
		FilterHref:   "/keys?" + run.Filter, Filter: run.Filter, State: run.State, Operator: run.Operator,
		Total: run.Total, Processed: run.Processed, Capped: run.Capped, Cap: s.cfg.BulkCap}
	if run.Reason != nil {
		v.Reason = *run.Reason
	}
	var bc BulkCounts
	_ = json.Unmarshal(run.Counts, &bc)
	v.ByState, v.ByOutcome = counts(bc.ByState, nil), counts(bc.ByOutcome, predictionLabels)
	var results map[string]int
	_ = json.Unmarshal(run.Results, &results)
	v.Results = counts(results, resultLabels)
	items, err := s.bulkItems(ctx, run.ID)
	if err != nil {
		return v, err
	}
	for _, it := range items {
		row := templates.BulkItemRow{Seq: it.Seq, KeyID: it.KeyID, KeyHref: fmt.Sprintf("/keys/%d", it.KeyID),
			KeyState: it.KeyState, KeyVersion: it.KeyVersion, Predicted: predictionLabels[it.Predicted]}
		if it.Result != nil {
			row.Result = *it.Result
		}
		if it.Detail != nil {
			row.Detail = *it.Detail
		}
		if it.RequestID != nil {
			row.RequestHref = fmt.Sprintf("/replays/%d", *it.RequestID)
		}
		v.Items = append(v.Items, row)
	}
	return v, nil
}

// bulkPage is GET /replays/bulk/{id}.
func (s *Server) bulkPage(c *gin.Context, r *request) error {
	v, err := s.loadBulkView(c, r)
	if err != nil {
		return err
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
	id, err := parseID(c.Param("id"))
	if err != nil {
		return templates.BulkView{}, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.getBulkRun(ctx, r.op, id)
	if err != nil {
		return templates.BulkView{}, err
	}
	v, err := s.bulkView(ctx, run)
	if err != nil {
		return v, err
	}
	return v, s.nameBulkItems(ctx, r.op, v.Items)
}

// bulkStartPage is POST /replays/bulk/start {plan, token, reason}: creates the previewed run and
// starts it in one step, then shows its progress.
func (s *Server) bulkStartPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.startBulk(ctx, r.op, r.ip, c.PostForm("plan"), c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/bulk/%d", run.ID))
	return nil
}
