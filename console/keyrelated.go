package console

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// relatedMax bounds the replay requests and findings the key page lists; the findings list
// filtered by the key shows the rest.
const relatedMax = 20

// keyRelated is what links to k from elsewhere: its replay requests and its reconciliation
// findings, each loaded through the operator's scope like their own pages.
func (s *Server) keyRelated(ctx context.Context, op *access.Operator, k *claim.Key) (templates.KeyRelated, error) {
	rel := templates.KeyRelated{FindingsHref: fmt.Sprintf("/reconcile/findings?key=%d", k.ID), Max: relatedMax}
	kc, err := s.cells.ofKey(k)
	if err != nil {
		return rel, err
	}
	reqs, err := kc.replays.ListForKey(ctx, replayActor(op, ""), k.ID, relatedMax)
	if err != nil {
		return rel, err
	}
	for i := range reqs {
		row := s.replayRow(ctx, &reqs[i], op)
		if op.Role < access.RoleOperator {
			row.Href = "" // the replay pages are an operator's
		}
		rel.Replays = append(rel.Replays, row)
	}
	finds, _, err := s.listFindings(ctx, op, reconcile.FindingFilter{KeyID: k.ID, Limit: relatedMax}, "")
	if err != nil && s.cells.cells == nil {
		return rel, err
	}
	if err != nil { // findings stay in the cell that matched them: one that is down leaves them out, not the page
		s.cfg.Logger.Warn("key page: related findings", "key_id", k.ID, "err", err)
		finds = nil
	}
	for _, f := range finds {
		row := findingRow(f, nil)
		rel.Findings = append(rel.Findings, templates.RelatedFinding{ID: f.ID, Kind: row.Kind, KindHelp: row.KindHelp,
			State: row.State, RunID: f.RunID, RunHref: fmt.Sprintf("/reconcile/runs/%d", f.RunID), Line: row.Line,
			LineHref: row.LineHref, Href: fmt.Sprintf("/reconcile/findings?key=%d#finding-%d", k.ID, f.ID)})
	}
	return rel, nil
}

// eventLinks are the links of a key's history events whose detail names a replay request
// ("request") or a reconciliation finding ("finding"), by event id.
func eventLinks(evs []claim.Event, keyID int64, canReplay bool) map[int64][]templates.EventLink {
	out := map[int64][]templates.EventLink{}
	for _, e := range evs {
		var d map[string]json.RawMessage
		if len(e.Detail) == 0 || json.Unmarshal(e.Detail, &d) != nil {
			continue
		}
		if id := detailID(d["request"]); id > 0 {
			l := templates.EventLink{Label: errs.Phrasef("replay request #%d", id), Class: "event-request"}
			if canReplay {
				l.Href = fmt.Sprintf("/replays/%d", id)
			}
			out[e.ID] = append(out[e.ID], l)
		}
		if id := detailID(d["finding"]); id > 0 {
			out[e.ID] = append(out[e.ID], templates.EventLink{Label: errs.Phrasef("finding #%d", id), Class: "event-finding",
				Href: fmt.Sprintf("/reconcile/findings?key=%d#finding-%d", keyID, id)})
		}
	}
	return out
}

// detailID is an event detail's id field, 0 when absent or not a whole number.
func detailID(raw json.RawMessage) int64 {
	var id int64
	if len(raw) == 0 || json.Unmarshal(raw, &id) != nil {
		return 0
	}
	return id
}
