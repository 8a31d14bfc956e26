package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/errs"
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
		Reason: r.Reason, Action: storedPhrase(r.PreviewPhrase, &r.Preview), State: r.State, NeedsApproval: r.NeedsApproval,
		CreatedAt: r.CreatedAt, CanApprove: r.State == "pending" && op.Role >= access.RoleOperator && op.ID != r.RequestedBy}
	if r.Approver != nil {
		row.Approver = *r.Approver
	}
	if r.OutcomeKind != nil {
		row.OutcomeKind = *r.OutcomeKind
	}
	row.Outcome = storedPhrase(r.OutcomePhrase, r.Outcome)
	if r.State == "pending" {
		row.Outcome = errs.Phrasef("waiting for a second operator's approval")
	}
	if r.BulkRunID != nil {
		row.BulkHref = fmt.Sprintf("/replays/bulk/%d", *r.BulkRunID)
	}
	return row
}

// replaysPage is GET /replays: pending approvals and recent requests.
func (s *Server) replaysPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := s.listReplays(ctx, r, 50)
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

// listReplays is the replay workflow's List for r in every cell holding one of its tenants:
// pending requests oldest first, then up to limit of the most recent others, merged across
// cells as one database would order them.
func (s *Server) listReplays(ctx context.Context, r *request, limit int) ([]replay.Request, error) {
	lists, err := eachCell(ctx, s.cells.For(keyScope(r.op), ""), func(ctx context.Context, c scopedCell) ([]replay.Request, error) {
		a := actorOf(r)
		if s.cells.cells != nil {
			a.Tenants = c.held.Tenants
		}
		return c.replays.List(ctx, a, limit)
	})
	if err != nil {
		return nil, err
	}
	if len(lists) == 1 {
		return lists[0], nil
	}
	var pending, recent []replay.Request
	for _, l := range lists {
		for _, q := range l {
			if q.State == "pending" {
				pending = append(pending, q)
			} else {
				recent = append(recent, q)
			}
		}
	}
	older := func(a, b replay.Request) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}
	slices.SortFunc(pending, older)
	slices.SortFunc(recent, func(a, b replay.Request) int { return older(b, a) })
	return append(pending[:min(len(pending), limit)], recent[:min(len(recent), limit)]...), nil
}
