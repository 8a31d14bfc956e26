package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// predictionLabels name a preview's predictions; resultLabels what a replay did.
var predictionLabels = map[string]string{
	string(replay.PredictRefused):        "refused by a guard",
	string(replay.PredictRecorded):       "already at the channel: recorded, nothing sent",
	string(replay.PredictRecordedFailed): "already at the channel, failed: recorded as failed",
	string(replay.PredictSend):           "not found twice: sent now",
	string(replay.PredictNotFoundOnce):   "not found once: parked for the quarantine, then re-checked",
	string(replay.PredictLookupError):    "downstream could not answer: parked",
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
	"interrupted":      "interrupted by a daemon stop: not repeated",
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

// replayRow is r as shown in ctx's language: what it replays and how it ended are said from
// their stored phrases; a request stored before them shows its English text.
func (s *Server) replayRow(ctx context.Context, r *replay.Request, op *access.Operator) templates.ReplayRow {
	row := templates.ReplayRow{ID: r.ID, Href: fmt.Sprintf("/replays/%d", r.ID), KeyID: r.KeyID,
		KeyHref: fmt.Sprintf("/keys/%d", r.KeyID), Tenant: r.Tenant, DigestShort: r.KeyDigest[:12], Requester: r.Requester,
		Reason: r.Reason, Action: storedText(ctx, r.PreviewPhrase, &r.Preview), State: r.State, NeedsApproval: r.NeedsApproval,
		CreatedAt: r.CreatedAt, CanApprove: r.State == "pending" && op.Role >= access.RoleOperator && op.ID != r.RequestedBy}
	if r.Approver != nil {
		row.Approver = *r.Approver
	}
	if r.OutcomeKind != nil {
		row.OutcomeKind = *r.OutcomeKind
	}
	row.Outcome = storedText(ctx, r.OutcomePhrase, r.Outcome)
	if r.State == "pending" {
		row.Outcome = say(ctx, "waiting for a second operator's approval")
	}
	if r.BulkRunID != nil {
		row.BulkHref = fmt.Sprintf("/replays/bulk/%d", *r.BulkRunID)
	}
	return row
}

// One function per action, shared by the page and its /api/v1 twin; the handlers below only
// decode and render.

// previewAction reads the key named by the route's {id} within r's scope and previews its
// replay (GET /keys/{id}/replay, GET /api/v1/keys/{id}/replay).
func (s *Server) previewAction(ctx context.Context, c *gin.Context, r *request) (*claim.Key, replay.Preview, error) {
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return nil, replay.Preview{}, err
	}
	return k, s.replays.Preview(ctx, actorOf(r), k), nil
}

// confirm is the confirmation (POST /keys/{id}/replay, POST /api/v1/keys/{id}/replay).
func (s *Server) confirm(c *gin.Context, r *request, keyID int64, token, reason string) (*replay.Request, bool, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	return s.ConfirmReplay(ctx, r.op, r.ip, keyID, token, reason)
}

// getReplay reads a request op may see (another tenant's is ErrNotFound).
func (s *Server) getReplay(ctx context.Context, op *access.Operator, id int64) (*replay.Request, error) {
	req, err := s.replays.Request(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := access.Decide(op, access.ObjReplay, strconv.FormatInt(id, 10), []string{req.Tenant}, false); err != nil {
		return nil, err
	}
	return req, nil
}

// replayParam reads the request named by the route's {id} (GET /replays/{id}, GET
// /api/v1/replays/{id}).
func (s *Server) replayParam(ctx context.Context, c *gin.Context, r *request) (*replay.Request, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	return s.getReplay(ctx, r.op, id)
}

// approve is a second operator's approval of the request named by {id}, which then runs
// (POST /replays/{id}/approve, POST /api/v1/replays/{id}/approve).
func (s *Server) approve(c *gin.Context, r *request) (*replay.Request, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+2*s.cfg.LookupTimeout)
	defer cancel()
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	return s.ApproveReplay(ctx, r.op, r.ip, id)
}

// previewBulk previews a bulk replay of the keys picked (ids) or the search f (POST
// /replays/bulk, POST /api/v1/replays/bulk). It writes nothing.
func (s *Server) previewBulk(c *gin.Context, r *request, f KeyFilter, ids []int64) (*replay.BulkPlan, error) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*s.cfg.QueryTimeout+s.cfg.BulkPreviewTimeout)
	defer cancel()
	sel, err := s.bulkKeys(ctx, r.op, f, ids)
	if err != nil {
		return nil, err
	}
	p, err := s.replays.PreviewBulk(ctx, actorOf(r), sel)
	return p, err
}

// startBulk starts a previewed bulk replay as a daemon job (POST /replays/bulk/start, POST
// /api/v1/replays/bulk/start).
func (s *Server) startBulk(c *gin.Context, r *request, plan, token, reason string) (*replay.BulkRun, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, err := s.replays.StartBulk(ctx, actorOf(r), plan, token, reason)
	return run, err
}

// bulkParam reads the run named by {id} and its items (GET /replays/bulk/{id}[/progress], GET
// /api/v1/replays/bulk/{id}).
func (s *Server) bulkParam(ctx context.Context, c *gin.Context, r *request) (*replay.BulkRun, []replay.BulkItem, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, nil, err
	}
	run, err := s.getBulkRun(ctx, r.op, id)
	if err != nil {
		return nil, nil, err
	}
	items, err := s.replays.BulkItems(ctx, id)
	return run, items, err
}

// replayPreviewView builds the preview page of k for r.
func (s *Server) replayPreviewView(ctx context.Context, r *request, k *claim.Key, p replay.Preview) (templates.ReplayPreviewView, error) {
	v := templates.ReplayPreviewView{Key: k, Preview: templates.ReplayPreviewData{Allowed: p.Allowed, Outcome: string(p.Outcome),
		Text: templates.Say(ctx, p.Why), Action: p.Action, Amount: p.Amount, NeedsApproval: p.NeedsApproval, Token: p.Token}}
	if r.op.Role >= access.RoleAdmin && k.Replayable() {
		v.CanMarkFinal, v.FinalToken = true, s.replays.ConfirmToken(replay.ActionFinal, r.op.ID, k.ID, k.Version)
		v.ReleaseToken = s.replays.ConfirmToken(replay.ActionRelease, r.op.ID, k.ID, k.Version)
	}
	prior, err := s.replays.ListForKey(ctx, actorOf(r), k.ID, 20)
	if err != nil {
		return v, err
	}
	for i := range prior {
		v.Requests = append(v.Requests, s.replayRow(ctx, &prior[i], r.op))
	}
	return v, s.nameReplayRows(ctx, r.op, v.Requests)
}

// replayPreview is GET /keys/{id}/replay: the read-only preview and the confirmation form.
func (s *Server) replayPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	k, p, err := s.previewAction(ctx, c, r)
	if err != nil {
		return err
	}
	v, err := s.replayPreviewView(ctx, r, k, p)
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
	if isRefusal(err) || isFieldError(err) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
		defer cancel()
		k, p, kerr := s.previewAction(ctx, c, r)
		if kerr != nil {
			return kerr
		}
		v, verr := s.replayPreviewView(ctx, r, k, p)
		if verr != nil {
			return verr
		}
		v.Error, v.Reason = pageMessage(c.Request.Context(), err), c.PostForm("reason")
		s.render(c, statusOf(err), templates.ReplayPreviewPage(chrome(r, "keys"), v))
		return nil
	}
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", req.ID))
	return nil
}

// replayPage is GET /replays/{id}.
func (s *Server) replayPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	req, err := s.replayParam(ctx, c, r)
	if err != nil {
		return err
	}
	row := s.replayRow(ctx, req, r.op)
	if req.State == "executing" {
		row.Waiting = templates.Say(ctx, s.replays.Waiting(ctx, req.KeyID))
	}
	one := []templates.ReplayRow{row}
	if err := s.nameReplayRows(ctx, r.op, one); err != nil {
		return err
	}
	row = one[0]
	s.render(c, http.StatusOK, templates.ReplayPage(chrome(r, "replays"), templates.ReplayView{Req: row}))
	return nil
}

// replaysPage is GET /replays: pending approvals and recent requests.
func (s *Server) replaysPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := s.replays.List(ctx, actorOf(r), 50)
	if err != nil {
		return err
	}
	var v templates.ReplaysView
	for i := range rows {
		row := s.replayRow(ctx, &rows[i], r.op)
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
	req, err := s.approve(c, r)
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/%d", req.ID))
	return nil
}

// markFinalPage is POST /keys/{id}/final (administrators).
func (s *Server) markFinalPage(c *gin.Context, r *request) error {
	return s.adminKeyPage(c, r, s.markFinal)
}

// releasePage is POST /keys/{id}/release (administrators).
func (s *Server) releasePage(c *gin.Context, r *request) error {
	return s.adminKeyPage(c, r, s.releaseForRetry)
}

// adminKeyPage runs an administrator's action on the key of the path with the form's token and
// reason, and goes back to the key's page.
func (s *Server) adminKeyPage(c *gin.Context, r *request, act keyAction) error {
	k, err := s.runKeyAction(c, r, act, c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", k.ID))
	return nil
}

// keyAction is an administrator's action on one key, confirmed by the token of its preview.
type keyAction func(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error)

// runKeyAction runs act on the key the path names, for the page and the API alike.
func (s *Server) runKeyAction(c *gin.Context, r *request, act keyAction, token, reason string) (*claim.Key, error) {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	return act(ctx, r.op, r.ip, id, token, reason)
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
		v.NoneReplayable = say(ctx, "Nothing to start: a guard refuses all %d keys of this selection (their states or live leases, listed below). Change the search or the selection.", p.Total)
	}
	for _, it := range p.Items {
		v.Items = append(v.Items, templates.BulkItemRow{Seq: it.Seq, KeyID: it.KeyID, KeyHref: fmt.Sprintf("/keys/%d", it.KeyID),
			KeyState: it.KeyState, KeyVersion: it.KeyVersion, Predicted: predictionLabels[it.Predicted]})
	}
	return v
}

func (s *Server) bulkView(ctx context.Context, run *replay.BulkRun, items []replay.BulkItem) templates.BulkView {
	v := templates.BulkView{ID: run.ID, Href: fmt.Sprintf("/replays/bulk/%d", run.ID),
		ProgressHref: fmt.Sprintf("/replays/bulk/%d/progress", run.ID),
		FilterHref:   "/keys?" + run.Filter, Filter: run.Filter, State: run.State, Operator: run.Operator,
		Total: run.Total, Processed: run.Processed, Capped: run.Capped, Cap: s.cfg.BulkCap}
	if run.Reason != nil {
		v.Reason = *run.Reason
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
		row.Detail = storedText(ctx, it.DetailPhrase, it.Detail)
		if it.RequestID != nil {
			row.RequestHref = fmt.Sprintf("/replays/%d", *it.RequestID)
		}
		v.Items = append(v.Items, row)
	}
	return v
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
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, items, err := s.bulkParam(ctx, c, r)
	if err != nil {
		return templates.BulkView{}, err
	}
	v := s.bulkView(ctx, run, items)
	return v, s.nameBulkItems(ctx, r.op, v.Items)
}

// bulkStartPage is POST /replays/bulk/start {plan, token, reason}: creates the previewed run and
// hands it to the daemon in one step, then shows its progress.
func (s *Server) bulkStartPage(c *gin.Context, r *request) error {
	run, err := s.startBulk(c, r, c.PostForm("plan"), c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/bulk/%d", run.ID))
	return nil
}
