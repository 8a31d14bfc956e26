package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
)

// The reconciliation pages drive a reconcile.Reconciler built on the console's own claim store,
// operations and audit log, so a finding's resolution is recorded in the same hash chain as
// every other console action.

// operationsFunc adapts Config.Operations to reconcile.Operations.
type operationsFunc func(name string) (claim.Operation, bool)

func (f operationsFunc) Get(name string) (claim.Operation, bool) { return f(name) }

// reconAuditor records the reconciler's resolutions in the console's audit log. A finding about
// a key is recorded under the key's tenant, so tenant-limited audit views see it.
type reconAuditor struct{ s *Server }

func (a reconAuditor) Record(ctx context.Context, actor, action, target string, detail map[string]any) error {
	e := audit.Entry{Actor: actor, Action: action, Target: target, Detail: detail}
	if id, ok := detail["key_id"].(int64); ok {
		keys, err := keys.NamesOf(ctx, a.s.db, []int64{id})
		if err != nil {
			return fmt.Errorf("audit %s: key tenant: %w", action, err)
		}
		if len(keys) == 1 {
			e.Tenants = []string{keys[0].Tenant}
		}
	}
	if id, ok := strings.CutPrefix(target, "finding:"); ok && e.Tenants == nil {
		e.Tenants = a.s.auditTenantsOf(ctx, access.ObjFinding, id) // a finding about the statement: its channel account's
	}
	return a.s.audit.Append(ctx, nil, e)
}

// keyTenants returns the tenant of each of ids that still exists.
func (s *Server) keyTenants(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := keys.NamesOf(ctx, s.db, ids)
	if err != nil {
		return nil, fmt.Errorf("finding keys: %w", err)
	}
	for _, r := range rows {
		out[r.ID] = r.Tenant
	}
	return out, nil
}

// findingTenants is objectTenants for a page of findings: a finding about a key is the key's
// tenant's, one whose key is gone "*"'s, one about the statement its channel account's.
func findingTenants(f *reconcile.Finding, keys map[int64]string, channels map[string][]string) []string {
	if f.KeyID == nil {
		return channels[f.Channel]
	}
	if t, ok := keys[*f.KeyID]; ok {
		return []string{t}
	}
	return []string{access.EveryTenant}
}

// findingsPageMax bounds the database pages one listing reads to fill a page for a
// tenant-limited operator (the rest is reached through the next-page cursor).
const findingsPageMax = 10

// listFindings returns up to f.Limit findings op may see, and the keyset cursor of the next page
// (0: none). Rows op may not see are skipped, not counted.
func (s *Server) listFindings(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) ([]reconcile.Finding, int64, error) {
	want := f.Limit
	var out []reconcile.Finding
	for range findingsPageMax {
		f.Limit = want + 1
		rows, err := s.recon.ListFindings(ctx, f)
		if err != nil {
			return nil, 0, err
		}
		var ids []int64
		for _, r := range rows {
			if r.KeyID != nil {
				ids = append(ids, *r.KeyID)
			}
		}
		tenants, err := s.keyTenants(ctx, ids)
		if err != nil {
			return nil, 0, err
		}
		var chans []string
		for _, r := range rows {
			chans = append(chans, r.Channel)
		}
		channels, err := reconcile.ChannelTenants(ctx, s.db, chans)
		if err != nil {
			return nil, 0, err
		}
		for i := range rows {
			if access.Decide(op, access.ObjFinding, "", findingTenants(&rows[i], tenants, channels), false) != nil {
				continue
			}
			if len(out) == want {
				return out, out[len(out)-1].ID, nil
			}
			out = append(out, rows[i])
		}
		if len(rows) < f.Limit {
			return out, 0, nil
		}
		f.BeforeID = rows[len(rows)-1].ID
	}
	// Bounded: what was scanned is shown, and the next page continues after it.
	return out, f.BeforeID, nil
}

// getFinding reads one finding op may see; one of a tenant op may not see is ErrNotFound.
func (s *Server) getFinding(ctx context.Context, op *access.Operator, id int64) (*reconcile.Finding, error) {
	if err := s.scope.Check(ctx, op, access.ObjFinding, strconv.FormatInt(id, 10), false); err != nil {
		return nil, err
	}
	return s.recon.GetFinding(ctx, id)
}

// findingStateCounts counts the findings matching f (whatever its state) that op may see, per
// state: the groups are decided one by one with the rule listFindings applies to each row.
func (s *Server) findingStateCounts(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) (map[reconcile.FindingState]int64, error) {
	groups, err := s.recon.FindingGroups(ctx, f)
	if err != nil {
		return nil, err
	}
	var chans []string
	for _, g := range groups {
		chans = append(chans, g.Channel)
	}
	channels, err := reconcile.ChannelTenants(ctx, s.db, chans)
	if err != nil {
		return nil, err
	}
	out := map[reconcile.FindingState]int64{}
	for _, g := range groups {
		tenants := channels[g.Channel]
		if g.HasKey {
			tenants = []string{access.EveryTenant}
			if g.KeyTenant != nil {
				tenants = []string{*g.KeyTenant}
			}
		}
		if access.Decide(op, access.ObjFinding, "", tenants, false) == nil {
			out[g.State] += g.N
		}
	}
	return out, nil
}

var reconNotices = map[string]string{
	"created":  "Recon job created; the daemon runs it on its schedule.",
	"updated":  "Recon job saved.",
	"enabled":  "Recon job enabled.",
	"disabled": "Recon job disabled: its schedule is paused.",
	"run":      "Run requested: the daemon's leader starts it at its next poll.",
	"channel":  "Channel account's tenants saved.",
}

var findingNotices = map[string]string{
	"resolved":  "Finding resolved.",
	"ignored":   "Finding ignored.",
	"recovered": "Recover done: the key was completed from the channel's document and the finding resolved.",
}

const (
	reconRunsShown     = 30
	findingsShown      = 50
	nextRunsShown      = 5
	uploadTimeout      = 15 * time.Minute
	reconStatementFile = "statement"
)

func (s *Server) reconActor(r *request) string { return r.op.Name }
