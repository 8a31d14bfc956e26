package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
)

// AuditEntry is one audited action of a bulk run: one per finding it changed.
type AuditEntry struct {
	Actor, IP, Action, Target, Tenant string
	Detail                            map[string]any
}

// BatchAuditor is an Auditor that also records many entries in the caller's transaction, so a
// bulk run's batch commits every finding's change with its audit row. Bulk runs need one.
type BatchAuditor interface {
	Auditor
	RecordBatch(ctx context.Context, tx *gorm.DB, entries []AuditEntry) error
}

// LogAuditor records a reconciler's actions in the audit log, each under the tenant of the
// finding it is about (FindingAuditTenant): the console's and the daemon's auditor.
type LogAuditor struct {
	Log *audit.Log
	DB  *gorm.DB
}

var _ BatchAuditor = LogAuditor{}

// Record appends one entry in its own transaction. A target "finding:ID" is recorded under that
// finding's tenant.
func (a LogAuditor) Record(ctx context.Context, actor, action, target string, detail map[string]any) error {
	e := audit.Entry{Actor: actor, Action: action, Target: target, Detail: detail}
	if id, ok := strings.CutPrefix(target, "finding:"); ok {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return fmt.Errorf("audit %s: target %s", action, target)
		}
		if e.Tenant, err = FindingAuditTenant(ctx, a.DB, n); err != nil {
			return fmt.Errorf("audit %s: %w", action, err)
		}
	}
	return a.Log.Append(ctx, nil, e)
}

// RecordBatch appends entries in tx, in order (audit.Log.AppendBatch).
func (a LogAuditor) RecordBatch(ctx context.Context, tx *gorm.DB, entries []AuditEntry) error {
	es := make([]audit.Entry, len(entries))
	for i, e := range entries {
		es[i] = audit.Entry{Actor: e.Actor, IP: e.IP, Action: e.Action, Target: e.Target, Tenant: e.Tenant, Detail: e.Detail}
	}
	return a.Log.AppendBatch(ctx, tx, es)
}

// FindingAuditTenant is the tenant an audit row about a finding is recorded under: its key's
// tenant, or its channel account's when the account has one tenant; "*" otherwise (so that an
// administrator of some tenants, who reads rows of their tenants, never reads about others').
// A finding that does not exist is "*".
func FindingAuditTenant(ctx context.Context, db *gorm.DB, id int64) (string, error) {
	var rows []struct {
		Tenant  *string
		Channel string
	}
	if err := db.WithContext(ctx).Raw(`SELECT d.tenant, d.channel FROM discrepancies d WHERE d.id = ?`, id).Scan(&rows).Error; err != nil {
		return "", fmt.Errorf("finding %d's tenant: %w", id, err)
	}
	if len(rows) == 0 {
		return AllTenants, nil
	}
	if rows[0].Tenant != nil {
		return *rows[0].Tenant, nil
	}
	m, err := ChannelTenants(ctx, db, []string{rows[0].Channel})
	if err != nil {
		return "", err
	}
	return oneTenant(m[rows[0].Channel]), nil
}

// oneTenant is the tenant of a set of one, else "*".
func oneTenant(tenants []string) string {
	if len(tenants) == 1 {
		return tenants[0]
	}
	return AllTenants
}
