package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
)

// Object-level scope for operators: the one place that decides whether an acting operator may
// see or manage another operator. An actor manages a target only when the target's tenants are
// a subset of the actor's ("*" covers every tenant; a "*" target only a "*" actor). A target
// outside the actor's scope is not found, exactly like a missing id.

// covers reports whether tenants actor cover every tenant of target.
func covers(actor, target []string) bool {
	if slices.Contains(actor, AllTenants) {
		return true
	}
	if len(target) == 0 {
		return false
	}
	for _, t := range target {
		if t == AllTenants || !slices.Contains(actor, t) {
			return false
		}
	}
	return true
}

// scopeWhere is the SQL form of covers for operators o: "" when scope sees every tenant.
// scope nil means no restriction (the CLI, run by whoever holds the database).
func scopeWhere(scope []string) (string, []any) {
	if scope == nil || slices.Contains(scope, AllTenants) {
		return "", nil
	}
	return `EXISTS (SELECT 1 FROM operator_tenants st WHERE st.operator_id = o.id)
		AND NOT EXISTS (SELECT 1 FROM operator_tenants st WHERE st.operator_id = o.id AND st.tenant NOT IN ?)`,
		[]any{scope}
}

// ForActor returns the operator with id as seen by actor: ErrNotFound when it is missing or
// outside actor's tenants.
func (d *Operators) ForActor(ctx context.Context, actor *Operator, id int64) (*Operator, error) {
	where, args := scopeWhere(actor.Tenants)
	q := "o.id = ?"
	if where != "" {
		q += " AND " + where
	}
	var rows []operatorRow
	if err := d.db.WithContext(ctx).Raw(operatorSelect+" WHERE "+q, append([]any{id}, args...)...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read operator: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return rows[0].operator(), nil
}

// ListFor returns the operators actor may see and manage, by name (bounded).
func (d *Operators) ListFor(ctx context.Context, actor *Operator) ([]*Operator, error) {
	where, args := scopeWhere(actor.Tenants)
	q := operatorSelect
	if where != "" {
		q += " WHERE " + where
	}
	var rows []operatorRow
	if err := d.db.WithContext(ctx).Raw(q+" ORDER BY o.name LIMIT 1000", args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out := make([]*Operator, len(rows))
	for i, r := range rows {
		out[i] = r.operator()
	}
	return out, nil
}

// adminLockID serializes changes to operators, so two admins cannot disable each other at once
// and leave no "*" admin.
const adminLockID = 0x1de0_0a0d

// lastStarAdmin refuses a change that leaves no active "*" admin when target was one before it.
// Called inside the change's transaction, after the change.
func lastStarAdmin(tx *gorm.DB, wasStarAdmin bool, name string) error {
	if !wasStarAdmin {
		return nil
	}
	var n int64
	if err := tx.Raw(`SELECT count(*) FROM operators o WHERE o.role = 'admin' AND NOT o.disabled
		AND EXISTS (SELECT 1 FROM operator_tenants t WHERE t.operator_id = o.id AND t.tenant = '*')`).Scan(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return refused("%s is the last active admin of every tenant (*); make another * admin first", name)
	}
	return nil
}

func (o *Operator) activeStarAdmin() bool {
	return o.Role == RoleAdmin && !o.Disabled && o.SeesAllTenants()
}

// loadOperatorFor loads the operator named by the route's :id for the acting operator: 404 when
// missing or outside r.op's tenants. Every admin handler that names an operator goes through it.
func (s *Server) loadOperatorFor(ctx context.Context, r *request, idParam string) (*Operator, error) {
	var id int64
	if _, err := fmt.Sscan(idParam, &id); err != nil || fmt.Sprint(id) != idParam {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return s.ops.ForActor(ctx, r.op, id)
}

// auditRefusal records an admin action that was refused (out of scope, a tenant not grantable, a
// guard) with its reason; the refusal itself is still returned to the caller.
func (s *Server) auditRefusal(ctx context.Context, r *request, action, target string, cause error) {
	reason := publicMessage(cause)
	if errors.Is(cause, ErrNotFound) {
		reason = "not found or outside your tenants"
	}
	if err := s.audit.Append(ctx, nil, Entry{Actor: r.op.Actor(), IP: r.ip, Action: action + "_refused", Target: target,
		Detail: map[string]any{"reason": reason}}); err != nil {
		s.cfg.Logger.Error("audit refusal", "action", action, "err", err)
	}
}

// Object scope for everything else an operator can name. Every object has a tenant set: the
// tenants whose data it holds or affects. objectTenants resolves it — the one place that knows
// where each kind's tenants come from — and decide compares it with the acting operator's:
//
//   - data (keys and their legal holds, replay requests, bulk runs, findings, reconciliation
//     runs and statements, daemon job runs, operators): seen and acted on only when the
//     operator's tenants cover the whole set; otherwise not found (404), exactly like a missing
//     id, and left out of lists;
//   - configuration that names tenants (recon jobs and channel accounts, daemon schedules,
//     retention policies and the floor): listed to every operator who shares a tenant with it
//     (a "*"-only one, like a policy or the reclaimer's schedule, to everyone), but changed,
//     run or imported into only when the operator covers the whole set; otherwise refused
//     (403), audited.
//
// The route table names an object in its path (:id, :name); enforce resolves it by routeObjects
// before the handler runs, so a handler never sees an object outside the caller's scope.
// Handlers that take an object's name from a form (a statement's channel, a schedule's name)
// call authorize themselves before doing anything.

// objectKind is a kind of object an action can name.
type objectKind string

const (
	objKey      objectKind = "key"
	objReplay   objectKind = "replay"
	objBulkRun  objectKind = "bulk_run"
	objFinding  objectKind = "finding"
	objReconRun objectKind = "recon_run"
	objReconJob objectKind = "recon_job"
	objChannel  objectKind = "channel"
	objSchedule objectKind = "schedule"
	objJobRun   objectKind = "job_run"
	objPolicy   objectKind = "retention_policy"
	objOperator objectKind = "operator"
)

// everyTenant is the tenant set of objects that concern every tenant (the reclaimer's
// schedule, a retention policy, a channel account nobody assigned).
const everyTenant = AllTenants

// configKinds are the kinds listed to everyone who shares a tenant with them (see above).
var configKinds = map[objectKind]bool{objReconJob: true, objChannel: true, objSchedule: true, objPolicy: true}

// configNouns name the configKinds in a refusal, as phrases the page translates.
var configNouns = map[objectKind]errs.Phrase{objReconJob: errs.Phrasef("recon job"), objChannel: errs.Phrasef("channel"),
	objSchedule: errs.Phrasef("schedule"), objPolicy: errs.Phrasef("retention policy")}

// routeObjects says which object a route's path parameter names, by the path's prefix (longest
// first). enforce resolves it before the handler; New refuses a route with a parameter that
// has no entry here, and TestObjectScopeMatrix calls every such route on objects of the caller's
// tenant, of another tenant and of "*".
var routeObjects = []struct {
	prefix string
	kind   objectKind
}{
	{"/replays/bulk/:id", objBulkRun},
	{"/api/v1/replays/bulk/:id", objBulkRun},
	{"/keys/:id", objKey},
	{"/api/v1/keys/:id", objKey},
	{"/replays/:id", objReplay},
	{"/api/v1/replays/:id", objReplay},
	{"/reconcile/findings/:id", objFinding},
	{"/api/v1/reconcile/findings/:id", objFinding},
	{"/reconcile/runs/:id", objReconRun},
	{"/api/v1/reconcile/runs/:id", objReconRun},
	{"/reconcile/jobs/:name", objReconJob},
	{"/api/v1/reconcile/jobs/:name", objReconJob},
	{"/reconcile/channels/:name", objChannel},
	{"/api/v1/reconcile/channels/:name", objChannel},
	{"/jobs/runs/:id", objJobRun},
	{"/api/v1/jobs/runs/:id", objJobRun},
	{"/admin/operators/:id", objOperator},
}

// routeObject returns the kind and parameter name of the object path names; ok is false for a
// path without a parameter, and err is set for one with a parameter routeObjects does not know.
func routeObject(path string) (kind objectKind, param string, ok bool, err error) {
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

// objectTenants resolves the tenant set of kind:ref. Errors: ErrNotFound when there is no such
// object (a malformed id included).
func (s *Server) objectTenants(ctx context.Context, kind objectKind, ref string) ([]string, error) {
	notFound := fmt.Errorf("%s %s: %w", kind, truncate(ref, 40), ErrNotFound)
	if !utf8.ValidString(ref) || strings.ContainsRune(ref, 0) || len(ref) > 256 {
		return nil, notFound // no object has such a name (and PostgreSQL would refuse it)
	}
	id := int64(0)
	switch kind {
	case objKey, objReplay, objBulkRun, objFinding, objReconRun, objJobRun, objOperator:
		var err error
		if id, err = parseID(ref); err != nil {
			return nil, notFound
		}
	}
	one := func(q string, args ...any) ([]string, error) {
		var rows []struct{ T *string }
		if err := s.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("resolve %s %s: %w", kind, truncate(ref, 40), err)
		}
		if len(rows) == 0 {
			return nil, notFound
		}
		var out []string
		for _, r := range rows {
			if r.T != nil {
				out = append(out, *r.T)
			}
		}
		return out, nil
	}
	channel := func(q string, args ...any) ([]string, error) {
		ch, err := one(q, args...)
		if err != nil {
			return nil, err
		}
		if len(ch) == 0 {
			return []string{everyTenant}, nil
		}
		return s.channelTenants(ctx, ch[0])
	}
	switch kind {
	case objKey:
		return one(`SELECT tenant AS t FROM idempotency_keys WHERE id = ?`, id)
	case objReplay:
		return one(`SELECT tenant AS t FROM replay_requests WHERE id = ?`, id)
	case objBulkRun:
		// The tenants of its keys (a run with none has the tenants of nobody: it holds nothing).
		ts, err := one(`SELECT k.tenant AS t FROM replay_bulk_runs r LEFT JOIN replay_bulk_items i ON i.run_id = r.id
			LEFT JOIN idempotency_keys k ON k.id = i.key_id WHERE r.id = ? GROUP BY k.tenant`, id)
		if err == nil && len(ts) == 0 {
			ts = []string{}
		}
		return ts, err
	case objFinding:
		// A finding about a key is that key's tenant's; a key gone meanwhile leaves it to "*"
		// operators; a finding about the statement (no key) is the channel account's.
		var rows []struct {
			Channel string
			KeyID   *int64
			Tenant  *string
		}
		if err := s.db.WithContext(ctx).Raw(`SELECT d.channel, d.key_id, k.tenant FROM discrepancies d
			LEFT JOIN idempotency_keys k ON k.id = d.key_id WHERE d.id = ?`, id).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("resolve finding %d: %w", id, err)
		}
		switch {
		case len(rows) == 0:
			return nil, notFound
		case rows[0].Tenant != nil:
			return []string{*rows[0].Tenant}, nil
		case rows[0].KeyID != nil:
			return []string{everyTenant}, nil
		}
		return s.channelTenants(ctx, rows[0].Channel)
	case objReconRun:
		return channel(`SELECT channel AS t FROM recon_runs WHERE id = ?`, id)
	case objReconJob:
		return channel(`SELECT channel AS t FROM recon_jobs WHERE name = ?`, ref)
	case objChannel:
		return s.channelTenants(ctx, ref)
	case objSchedule:
		if job, ok := strings.CutPrefix(ref, reconcile.ScheduleName("")); ok {
			return channel(`SELECT channel AS t FROM recon_jobs WHERE name = ?`, job)
		}
		return []string{everyTenant}, nil // the reclaimer, the purge, the outbox relay: every tenant's keys
	case objJobRun:
		sched, err := one(`SELECT schedule AS t FROM job_runs WHERE id = ?`, id)
		if err != nil || len(sched) == 0 {
			return []string{everyTenant}, err
		}
		return s.objectTenants(ctx, objSchedule, sched[0])
	case objPolicy:
		return []string{everyTenant}, nil // a policy applies to every tenant's keys
	case objOperator:
		return one(`SELECT tenant AS t FROM operators o LEFT JOIN operator_tenants t ON t.operator_id = o.id WHERE o.id = ?`, id)
	}
	return nil, fmt.Errorf("object kind %q: %w", kind, ErrNotFound)
}

// channelTenants is the tenant set of a channel account ("*" when it has none).
func (s *Server) channelTenants(ctx context.Context, channel string) ([]string, error) {
	m, err := reconcile.ChannelTenants(ctx, s.db, []string{channel})
	if err != nil {
		return nil, err
	}
	return m[channel], nil
}

// sharesTenant reports whether op sees any of tenants: every operator sees a "*" object of
// configuration, a "*" operator sees everything.
func sharesTenant(op []string, tenants []string) bool {
	if slices.Contains(op, AllTenants) || slices.Contains(tenants, AllTenants) {
		return true
	}
	for _, t := range tenants {
		if slices.Contains(op, t) {
			return true
		}
	}
	return false
}

// scopeError is a refusal by object scope: ErrNotFound (answered exactly like a missing id) or
// a RefusedError of kind ErrForbidden. enforce audits the ones of state-changing requests.
type scopeError struct {
	object string
	err    error
}

func (e *scopeError) Error() string { return e.err.Error() }
func (e *scopeError) Unwrap() error { return e.err }

// decide is the one decision: may op, with tenants, see (act false) or act on (act true) an
// object of kind with tenants? nil, or a scopeError.
func decide(op *Operator, kind objectKind, ref string, tenants []string, act bool) error {
	object := string(kind) + ":" + truncate(ref, 60)
	if kind == objBulkRun && len(tenants) == 0 {
		return nil // holds no key: nothing of any tenant
	}
	if covers(op.Tenants, tenants) {
		return nil
	}
	if configKinds[kind] && sharesTenant(op.Tenants, tenants) {
		if !act {
			return nil
		}
		why := errs.Phrasef("%s %s belongs to tenants you are not allowed: only an operator of all of them may do this",
			configNouns[kind], truncate(ref, 60))
		return &scopeError{object, &RefusedError{Kind: ErrForbidden, Reason: why.String(), Why: why}}
	}
	return &scopeError{object, fmt.Errorf("%s: %w", object, ErrNotFound)}
}

// inScope resolves kind:ref and decides for op; ErrNotFound for a missing object.
func (s *Server) inScope(ctx context.Context, op *Operator, kind objectKind, ref string, act bool) error {
	tenants, err := s.objectTenants(ctx, kind, ref)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return &scopeError{string(kind) + ":" + truncate(ref, 60), err}
		}
		return err
	}
	return decide(op, kind, ref, tenants, act)
}

// authorize is inScope for an action of r's operator; a refusal is audited under action.
func (s *Server) authorize(ctx context.Context, r *request, action string, kind objectKind, ref string) error {
	err := s.inScope(ctx, r.op, kind, ref, true)
	var se *scopeError
	if errors.As(err, &se) {
		s.auditRefusal(ctx, r, action, se.object, err)
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
		return s.inScope(ctx, r.op, kind, c.Param(param), false)
	}
	return s.authorize(ctx, r, rt.Method+" "+rt.Path, kind, c.Param(param))
}
