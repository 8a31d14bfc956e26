package console

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"gorm.io/gorm"
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
