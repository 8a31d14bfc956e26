package console

import (
	"context"
	"strconv"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
)

// The command line's entry points (`idemops keys`, `replay`, `findings`): the functions the pages
// and /api/v1 call, for an operator authenticated by an API token, or for Everyone when the
// command holds the database URL (which reaches every tenant anyway). Each loads its object
// within op's scope, exactly as the pages do, so another tenant's key, request or finding is
// ErrNotFound here too.

// Everyone is the operator the command line acts as when it holds the database URL and no
// operator token: every tenant, read-only (an action needs a named operator: Operators.ByToken).
var Everyone = &access.Operator{Name: "cli", Role: access.RoleViewer, Tenants: []string{access.AllTenants}}

// KeyFor reads one key op may see (ErrNotFound otherwise) and its history, newest last.
func (s *Server) KeyFor(ctx context.Context, op *access.Operator, id int64) (*claim.Key, []claim.Event, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	k, kc, err := s.keyIn(ctx, op, id)
	if err != nil {
		return nil, nil, err
	}
	evs, err := kc.claims.History(ctx, k.ID, 1000)
	return k, evs, err
}

// SearchKeysFor is one page of the keys op may see that match f, newest first, and the cursor of
// the next: the key search page's, in every cell holding one of op's tenants.
func (s *Server) SearchKeysFor(ctx context.Context, op *access.Operator, f KeyFilter) ([]KeySummary, *Cursor, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	return s.searchKeys(ctx, op, f)
}

// FindKeysFor is the keys op may see whose raw key is exactly key: the find page's, in every
// cell holding one of op's tenants.
func (s *Server) FindKeysFor(ctx context.Context, op *access.Operator, key string) ([]KeySummary, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	return s.findKeys(ctx, op, key)
}

// FindingsFor lists up to f.Limit findings op may see, newest first, and the cursor of the next
// page (0: none): the findings page's listing. Across cells a next page is a position in each
// cell, which one id cannot say: there it lists the first page of f.BeforeID and says 0.
func (s *Server) FindingsFor(ctx context.Context, op *access.Operator, f reconcile.FindingFilter) ([]reconcile.Finding, int64, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	rows, next, err := s.listFindings(ctx, op, f, "")
	id, _ := strconv.ParseInt(next, 10, 64)
	return rows, id, err
}

// FindingsPageFor is one page of the findings op may see that match f, newest first, as the
// findings page lists it, and the cursor of the next ("": none): before is the previous page's
// cursor ("": the newest) — a finding id, or across cells the position in every cell
// ("a:123,b:456"), so paging across cells is exact at any depth. A cursor it cannot read is a
// field error on before.
func (s *Server) FindingsPageFor(ctx context.Context, op *access.Operator, f reconcile.FindingFilter, before string) ([]reconcile.Finding, string, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	if !isCellsCursor(before) {
		var err error
		if f.BeforeID, err = parseBefore(before); err != nil {
			return nil, "", err
		}
	}
	return s.listFindings(ctx, op, f, before)
}

// PreviewReplay is the replay preview of key id for op (its confirmation token included): the
// Operation's lookup, read-only.
func (s *Server) PreviewReplay(ctx context.Context, op *access.Operator, ip string, id int64) (replay.Preview, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	if op.Role < access.RoleOperator {
		return replay.Preview{}, ErrForbidden
	}
	k, kc, err := s.keyIn(ctx, op, id)
	if err != nil {
		return replay.Preview{}, err
	}
	return kc.replays.Preview(ctx, replayActor(op, ip), k), nil
}

// ConfirmReplay requests the replay of key id under a preview's token, with a reason; dup says
// the token was used before (the same request, nothing executed again).
func (s *Server) ConfirmReplay(ctx context.Context, op *access.Operator, ip string, id int64, token, reason string) (req *replay.Request, dup bool, err error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	if op.Role < access.RoleOperator {
		return nil, false, ErrForbidden
	}
	k, kc, err := s.keyIn(ctx, op, id)
	if err != nil {
		return nil, false, err
	}
	req, dup, err = kc.replays.Confirm(ctx, replayActor(op, ip), k, token, reason)
	return req, dup, err
}

// ApproveReplay approves (and so executes) replay request id as op, a second operator.
func (s *Server) ApproveReplay(ctx context.Context, op *access.Operator, ip string, id int64) (*replay.Request, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	if op.Role < access.RoleOperator {
		return nil, ErrForbidden
	}
	req, rc, err := s.replayIn(ctx, op, id)
	if err != nil {
		return nil, err
	}
	req, err = rc.replays.Approve(ctx, replayActor(op, ip), req)
	return req, err
}

// PreviewFindingsBulk is what a bulk action on findings would act on, in op's scope: the
// console's preview (count, amounts, sample, the newest finding seen). Writes nothing.
func (s *Server) PreviewFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (*reconcile.BulkPreview, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	p, _, err := s.previewFindingsBulk(ctx, op, ip, in)
	return p, err
}

// StartFindingsBulk starts a bulk action on findings in op's scope, up to in.UpTo (the newest
// finding its preview saw): the daemon's job works it, or a second operator approves it first.
// (Across cells an action is a run per cell and needs the preview's position in each, which
// in.UpTo cannot carry: there it is refused.)
func (s *Server) StartFindingsBulk(ctx context.Context, op *access.Operator, ip string, in FindingsBulkInput) (*reconcile.BulkRun, error) {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	runs, err := s.startFindingsBulk(ctx, op, ip, in)
	if err != nil {
		return nil, err
	}
	return runs[0], nil
}
