package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
)

// Object scope in the console: the route table names an object in its path (:id, :name);
// enforce resolves it by routeObjects and asks access.Scope before the handler runs, so a
// handler never sees an object outside the caller's scope. Handlers that take an object's name
// from a form (a statement's channel, a schedule's name) call authorize themselves before doing
// anything. The decision itself is access's (Scope.Check, Decide).

// loadOperatorFor loads the operator named by the route's :id for the acting operator: 404 when
// missing or outside r.op's tenants. Every admin handler that names an operator goes through it.
func (s *Server) loadOperatorFor(ctx context.Context, r *request, idParam string) (*access.Operator, error) {
	var id int64
	if _, err := fmt.Sscan(idParam, &id); err != nil || fmt.Sprint(id) != idParam {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return s.ops.ForActor(ctx, r.op, id)
}

// auditRefusal records an action that was refused (out of scope, a role too low, a tenant not
// grantable, a guard) with its reason; the refusal itself is still returned to the caller.
// Refusals are counted, not each written (audit.Log.Refused): one chained row per operator,
// action and minute with its count, and idemops_console_refusals_total.
func (s *Server) auditRefusal(ctx context.Context, r *request, action, target string, cause error) {
	reason := publicMessage(cause)
	if errors.Is(cause, ErrNotFound) {
		reason = "not found or outside your tenants"
	}
	s.metrics.refusals.WithLabelValues(action).Inc()
	if err := s.audit.Refused(ctx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action + "_refused", Target: target,
		Tenants: r.op.Tenants, Detail: map[string]any{"reason": reason}}); err != nil {
		s.cfg.Logger.Error("audit refusal", "action", action, "err", err)
	}
}

// routeObjects says which object a route's path parameter names, by the path's prefix (longest
// first). enforce resolves it before the handler; New refuses a route with a parameter that
// has no entry here, and TestObjectScopeMatrix calls every such route on objects of the caller's
// tenant, of another tenant and of "*".
var routeObjects = []struct {
	prefix string
	kind   access.ObjectKind
}{
	{"/replays/bulk/:id", access.ObjBulkRun},
	{"/api/v1/replays/bulk/:id", access.ObjBulkRun},
	{"/keys/:id", access.ObjKey},
	{"/api/v1/keys/:id", access.ObjKey},
	{"/replays/:id", access.ObjReplay},
	{"/api/v1/replays/:id", access.ObjReplay},
	{"/reconcile/findings/bulk/:id", access.ObjFindingBulk},
	{"/api/v1/reconcile/findings/bulk/:id", access.ObjFindingBulk},
	{"/reconcile/findings/:id", access.ObjFinding},
	{"/api/v1/reconcile/findings/:id", access.ObjFinding},
	{"/reconcile/runs/:id", access.ObjReconRun},
	{"/api/v1/reconcile/runs/:id", access.ObjReconRun},
	{"/reconcile/jobs/:name", access.ObjReconJob},
	{"/api/v1/reconcile/jobs/:name", access.ObjReconJob},
	{"/reconcile/channels/:name", access.ObjChannel},
	{"/api/v1/reconcile/channels/:name", access.ObjChannel},
	{"/jobs/runs/:id", access.ObjJobRun},
	{"/api/v1/jobs/runs/:id", access.ObjJobRun},
	{"/admin/operators/:id", access.ObjOperator},
}

// routeObject returns the kind and parameter name of the object path names; ok is false for a
// path without a parameter, and err is set for one with a parameter routeObjects does not know.
func routeObject(path string) (kind access.ObjectKind, param string, ok bool, err error) {
	i := strings.IndexAny(path, ":*")
	if i < 0 || strings.HasPrefix(path[i:], "*file") {
		return "", "", false, nil
	}
	for _, ro := range routeObjects {
		if path == ro.prefix || strings.HasPrefix(path, ro.prefix+"/") {
			param = ro.prefix[strings.LastIndex(ro.prefix, ":")+1:]
			return ro.kind, param, true, nil
		}
	}
	return "", "", false, fmt.Errorf("route %s names an object that routeObjects does not know", path)
}

// authorize is the scope check (access.Scope.Check) of an action of r's operator; a refusal is audited under action.
func (s *Server) authorize(ctx context.Context, r *request, action string, kind access.ObjectKind, ref string) error {
	err := s.scopeCheck(ctx, r.op, kind, ref, true)
	var se *access.ScopeError
	if errors.As(err, &se) {
		s.auditRefusal(ctx, r, action, se.Object, err)
	}
	return err
}

// routeScope is enforce's check of the object a route's path names: see for GET, act for the
// rest; the refusal of an action is audited (under the route).
func (s *Server) routeScope(c *gin.Context, r *request, rt route) error {
	kind, param, ok, err := routeObject(rt.Path)
	if err != nil || !ok {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	act := rt.Method != http.MethodGet
	if !act {
		return s.scopeCheck(ctx, r.op, kind, c.Param(param), false)
	}
	return s.authorize(ctx, r, rt.Method+" "+rt.Path, kind, c.Param(param))
}

// auditTenantsOf is the tenant set of kind:ref for its audit row ("*" when it cannot be
// resolved: only administrators of every tenant read such a row).
func (s *Server) auditTenantsOf(ctx context.Context, kind access.ObjectKind, ref string) []string {
	ts, err := s.scope.Tenants(ctx, kind, ref)
	if err != nil {
		return []string{access.AllTenants}
	}
	return ts
}

// channelAuditTenants is auditTenantsOf a channel account.
func (s *Server) channelAuditTenants(ctx context.Context, channel string) []string {
	return s.auditTenantsOf(ctx, access.ObjChannel, channel)
}

// visibleBy keeps the items op may see as objects of kind whose tenants are those of their
// owner (a schedule, a channel account); ref gives an item's owner and its name in refusals,
// tenantsOf resolves the owners' tenant sets at once.
func visibleBy[T any](ctx context.Context, op *access.Operator, items []T, kind access.ObjectKind,
	tenantsOf func(context.Context, []string) (map[string][]string, error), ref func(T) (owner, name string)) ([]T, error) {
	owners := make([]string, len(items))
	for i, it := range items {
		owners[i], _ = ref(it)
	}
	tenants, err := tenantsOf(ctx, owners)
	if err != nil {
		return nil, err
	}
	out := items[:0]
	for _, it := range items {
		owner, name := ref(it)
		if access.Decide(op, kind, name, tenants[owner], false) == nil {
			out = append(out, it)
		}
	}
	return out, nil
}
