package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/reconcile"
)

// The one scope decision: an operator sees or acts on an object only when the object's tenants
// are within the operator's. For operators themselves: whether an acting operator may see or
// manage another operator. An actor manages a target only when the target's tenants are
// a subset of the actor's ("*" covers every tenant; a "*" target only a "*" actor). A target
// outside the actor's scope is not found, exactly like a missing id.

// Covers reports whether tenants actor cover every tenant of target.
func Covers(actor, target []string) bool {
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

// scopeWhere is the SQL form of Covers for a query of operators: "" when scope sees every
// tenant. scope nil means no restriction (the CLI, run by whoever holds the database).
func scopeWhere(scope []string) (string, []any) {
	if scope == nil || slices.Contains(scope, AllTenants) {
		return "", nil
	}
	return `EXISTS (SELECT 1 FROM operator_tenants st WHERE st.operator_id = operators.id)
		AND NOT EXISTS (SELECT 1 FROM operator_tenants st WHERE st.operator_id = operators.id AND st.tenant NOT IN ?)`,
		[]any{scope}
}

// inScope is a query of the operators actor may see and manage.
func (d *Operators) inScope(ctx context.Context, actor *Operator) *gorm.DB {
	q := operators(d.db.WithContext(ctx))
	if where, args := scopeWhere(actor.Tenants); where != "" {
		q = q.Where(where, args...)
	}
	return q
}

// ForActor returns the operator with id as seen by actor: ErrNotFound when it is missing or
// outside actor's tenants.
func (d *Operators) ForActor(ctx context.Context, actor *Operator, id int64) (*Operator, error) {
	var rows []operatorModel
	if err := d.inScope(ctx, actor).Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read operator: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return rows[0].operator(), nil
}

// ListFor returns the operators actor may see and manage, by name (bounded).
func (d *Operators) ListFor(ctx context.Context, actor *Operator) ([]*Operator, error) {
	var rows []operatorModel
	if err := d.inScope(ctx, actor).Order("name").Limit(1000).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out := make([]*Operator, len(rows))
	for i := range rows {
		out[i] = rows[i].operator()
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
	if err := tx.Model(&operatorModel{}).Where(`role = 'admin' AND NOT disabled
		AND EXISTS (SELECT 1 FROM operator_tenants t WHERE t.operator_id = operators.id AND t.tenant = '*')`).Count(&n).Error; err != nil {
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

// Object scope for everything else an operator can name. Every object has a tenant set: the
// tenants whose data it holds or affects. Scope.Tenants resolves it — the one place that knows
// where each kind's tenants come from — and Decide compares it with the acting operator's:
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
// The console's route table names an object in its path (:id, :name) and the console checks it
// (Scope.Check) before the handler runs, so a handler never sees an object outside the caller's
// scope; handlers that take an object's name from a form check it themselves first.

// ObjectKind is a kind of object an action can name.
type ObjectKind string

// The kinds of objects.
const (
	ObjKey     ObjectKind = "key"
	ObjReplay  ObjectKind = "replay"
	ObjBulkRun ObjectKind = "bulk_run"
	ObjFinding ObjectKind = "finding"
	// ObjFindingBulk is a bulk run of findings: its tenants are its findings' (recorded when it
	// started).
	ObjFindingBulk ObjectKind = "finding_bulk"
	ObjReconRun    ObjectKind = "recon_run"
	ObjReconJob    ObjectKind = "recon_job"
	ObjChannel     ObjectKind = "channel"
	ObjSchedule    ObjectKind = "schedule"
	ObjJobRun      ObjectKind = "job_run"
	ObjPolicy      ObjectKind = "retention_policy"
	ObjOperator    ObjectKind = "operator"
)

// EveryTenant is the tenant set of objects that concern every tenant (the reclaimer's
// schedule, a retention policy, a channel account nobody assigned).
const EveryTenant = AllTenants

// configKinds are the kinds listed to everyone who shares a tenant with them (see above).
var configKinds = map[ObjectKind]bool{ObjReconJob: true, ObjChannel: true, ObjSchedule: true, ObjPolicy: true}

// IsConfig reports whether k is configuration (listed to everyone who shares a tenant with it;
// changed only by operators covering all its tenants) rather than data.
func (k ObjectKind) IsConfig() bool { return configKinds[k] }

// configNouns name the configKinds in a refusal, as phrases the page translates.
var configNouns = map[ObjectKind]errs.Phrase{ObjReconJob: errs.Phrasef("recon job"), ObjChannel: errs.Phrasef("channel"),
	ObjSchedule: errs.Phrasef("schedule"), ObjPolicy: errs.Phrasef("retention policy")}

// Scope resolves the tenant set of every kind of object and decides whether an operator may see
// or act on it.
type Scope struct{ db *gorm.DB }

// NewScope returns the scope decisions on db.
func NewScope(db *gorm.DB) *Scope { return &Scope{db: db} }

// Tenants resolves the tenant set of kind:ref. Errors: ErrNotFound when there is no such
// object (a malformed id included).
func (s *Scope) Tenants(ctx context.Context, kind ObjectKind, ref string) ([]string, error) {
	notFound := fmt.Errorf("%s %s: %w", kind, truncate(ref, 40), ErrNotFound)
	if !utf8.ValidString(ref) || strings.ContainsRune(ref, 0) || len(ref) > 256 {
		return nil, notFound // no object has such a name (and PostgreSQL would refuse it)
	}
	id := int64(0)
	switch kind {
	case ObjKey, ObjReplay, ObjBulkRun, ObjFinding, ObjFindingBulk, ObjReconRun, ObjJobRun, ObjOperator:
		var err error
		if id, err = strconv.ParseInt(ref, 10, 64); err != nil || id <= 0 {
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
			return []string{EveryTenant}, nil
		}
		return s.ChannelTenants(ctx, ch[0])
	}
	switch kind {
	case ObjKey:
		return one(`SELECT tenant AS t FROM idempotency_keys WHERE id = ?`, id)
	case ObjReplay:
		return one(`SELECT tenant AS t FROM replay_requests WHERE id = ?`, id)
	case ObjBulkRun:
		// The tenants of its keys (a run with none has the tenants of nobody: it holds nothing).
		ts, err := one(`SELECT k.tenant AS t FROM replay_bulk_runs r LEFT JOIN replay_bulk_items i ON i.run_id = r.id
			LEFT JOIN idempotency_keys k ON k.id = i.key_id WHERE r.id = ? GROUP BY k.tenant`, id)
		if err == nil && len(ts) == 0 {
			ts = []string{}
		}
		return ts, err
	case ObjFinding:
		// A finding about a key is that key's tenant's, recorded with the finding (it stays so
		// after the key is purged; "*" for one whose key was gone before that was recorded); a
		// finding about the statement (no tenant) is the channel account's.
		var rows []struct {
			Channel string
			KeyID   *int64
			Tenant  *string
		}
		if err := s.db.WithContext(ctx).Raw(`SELECT d.channel, d.key_id, COALESCE(d.tenant, k.tenant) AS tenant FROM discrepancies d
			LEFT JOIN idempotency_keys k ON k.id = d.key_id WHERE d.id = ?`, id).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("resolve finding %d: %w", id, err)
		}
		switch {
		case len(rows) == 0:
			return nil, notFound
		case rows[0].Tenant != nil:
			return []string{*rows[0].Tenant}, nil
		case rows[0].KeyID != nil:
			return []string{EveryTenant}, nil
		}
		return s.ChannelTenants(ctx, rows[0].Channel)
	case ObjFindingBulk:
		// The union of its findings' tenant sets, fixed when it started.
		var rows []struct{ Tenants string }
		if err := s.db.WithContext(ctx).Raw(`SELECT array_to_json(tenants)::text AS tenants FROM finding_bulk_runs WHERE id = ?`, id).
			Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("resolve %s %d: %w", kind, id, err)
		}
		if len(rows) == 0 {
			return nil, notFound
		}
		var ts []string
		if json.Unmarshal([]byte(rows[0].Tenants), &ts) != nil || len(ts) == 0 {
			return []string{EveryTenant}, nil // no findings recorded: only operators of every tenant
		}
		return ts, nil
	case ObjReconRun:
		return channel(`SELECT channel AS t FROM recon_runs WHERE id = ?`, id)
	case ObjReconJob:
		return channel(`SELECT channel AS t FROM recon_jobs WHERE name = ?`, ref)
	case ObjChannel:
		return s.ChannelTenants(ctx, ref)
	case ObjSchedule:
		if job, ok := strings.CutPrefix(ref, reconcile.ScheduleName("")); ok {
			return channel(`SELECT channel AS t FROM recon_jobs WHERE name = ?`, job)
		}
		return []string{EveryTenant}, nil // the reclaimer, the purge, the outbox relay: every tenant's keys
	case ObjJobRun:
		sched, err := one(`SELECT schedule AS t FROM job_runs WHERE id = ?`, id)
		if err != nil || len(sched) == 0 {
			return []string{EveryTenant}, err
		}
		return s.Tenants(ctx, ObjSchedule, sched[0])
	case ObjPolicy:
		return []string{EveryTenant}, nil // a policy applies to every tenant's keys
	case ObjOperator:
		return one(`SELECT tenant AS t FROM operators o LEFT JOIN operator_tenants t ON t.operator_id = o.id WHERE o.id = ?`, id)
	}
	return nil, fmt.Errorf("object kind %q: %w", kind, ErrNotFound)
}

// ChannelTenants is the tenant set of a channel account ("*" when it has none).
func (s *Scope) ChannelTenants(ctx context.Context, channel string) ([]string, error) {
	m, err := reconcile.ChannelTenants(ctx, s.db, []string{channel})
	if err != nil {
		return nil, err
	}
	return m[channel], nil
}

// SharesTenant reports whether op sees any of tenants: every operator sees a "*" object of
// configuration, a "*" operator sees everything.
func SharesTenant(op []string, tenants []string) bool {
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

// ScopeError is a refusal by object scope: ErrNotFound (answered exactly like a missing id) or
// an *errs.RefusedError of kind Forbidden. Object names what was refused ("key:12"), for the
// audit row of a refused action.
type ScopeError struct {
	Object string
	err    error
}

func (e *ScopeError) Error() string { return e.err.Error() }
func (e *ScopeError) Unwrap() error { return e.err }

// NotFoundError is the refusal of kind:ref that Check answers for a missing object (for a
// caller that looked in several databases — tenant cells — and found it in none).
func NotFoundError(kind ObjectKind, ref string) error {
	object := string(kind) + ":" + truncate(ref, 60)
	return &ScopeError{object, fmt.Errorf("%s: %w", object, ErrNotFound)}
}

// Decide is the one decision: may op see (act false) or act on (act true) the object kind:ref
// whose tenants are tenants? nil, or a *ScopeError.
func Decide(op *Operator, kind ObjectKind, ref string, tenants []string, act bool) error {
	object := string(kind) + ":" + truncate(ref, 60)
	if kind == ObjBulkRun && len(tenants) == 0 {
		return nil // holds no key: nothing of any tenant
	}
	if Covers(op.Tenants, tenants) {
		return nil
	}
	if configKinds[kind] && SharesTenant(op.Tenants, tenants) {
		if !act {
			return nil
		}
		why := errs.Phrasef("%s %s belongs to tenants you are not allowed: only an operator of all of them may do this",
			configNouns[kind], truncate(ref, 60))
		return &ScopeError{object, errs.Refused(errs.Forbidden, why)}
	}
	return &ScopeError{object, fmt.Errorf("%s: %w", object, ErrNotFound)}
}

// Check resolves kind:ref and decides for op: nil, ErrNotFound for a missing object, or a
// *ScopeError.
func (s *Scope) Check(ctx context.Context, op *Operator, kind ObjectKind, ref string, act bool) error {
	tenants, err := s.Tenants(ctx, kind, ref)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return &ScopeError{string(kind) + ":" + truncate(ref, 60), err}
		}
		return err
	}
	return Decide(op, kind, ref, tenants, act)
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Bind returns ctx carrying op's tenants for the database (internal/tenantdb): on the console's
// handle, the statements run under it see and change only those tenants' rows — row-level
// security behind the Go checks above, not instead of them.
func Bind(ctx context.Context, op *Operator) context.Context {
	return tenantdb.WithTenants(ctx, op.Tenants)
}
