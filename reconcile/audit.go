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
	Actor, IP, Action, Target string
	// Tenants are the tenants of what it is about (audit.Entry.Tenants).
	Tenants []string
	Detail  map[string]any
}

// BatchAuditor is an Auditor that also records many entries in the caller's transaction, so a
// bulk run's batch commits every finding's change with its audit row. Bulk runs need one.
type BatchAuditor interface {
	Auditor
	RecordBatch(ctx context.Context, tx *gorm.DB, entries []AuditEntry) error
}

// LogAuditor records a reconciler's actions in the audit log, each under the tenant of the
// finding it is about (FindingAuditTenants): the console's and the daemon's auditor.
type LogAuditor struct {
	Log *audit.Log
	DB  *gorm.DB
}

var _ BatchAuditor = LogAuditor{}

// Record appends one entry in its own transaction. A target "finding:ID" is recorded under that
// finding's tenants.
func (a LogAuditor) Record(ctx context.Context, actor, action, target string, detail map[string]any) error {
	e := audit.Entry{Actor: actor, Action: action, Target: target, Detail: detail}
	if id, ok := strings.CutPrefix(target, "finding:"); ok {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return fmt.Errorf("audit %s: target %s", action, target)
		}
		if e.Tenants, err = FindingAuditTenants(ctx, a.DB, n); err != nil {
			return fmt.Errorf("audit %s: %w", action, err)
		}
	}
	return a.Log.Append(ctx, nil, e)
}

// RecordBatch appends entries in tx, in order (audit.Log.AppendBatch).
func (a LogAuditor) RecordBatch(ctx context.Context, tx *gorm.DB, entries []AuditEntry) error {
	es := make([]audit.Entry, len(entries))
	for i, e := range entries {
		es[i] = audit.Entry{Actor: e.Actor, IP: e.IP, Action: e.Action, Target: e.Target, Tenants: e.Tenants, Detail: e.Detail}
	}
	return a.Log.AppendBatch(ctx, tx, es)
}

// FindingAuditTenants are the tenants an audit row about a finding is recorded under: its key's
// tenant (recorded with the finding), or its channel account's tenants for a finding about a
// statement; "*" for a finding that does not exist.
func FindingAuditTenants(ctx context.Context, db *gorm.DB, id int64) ([]string, error) {
	var rows []struct {
		Tenant  *string
		Channel string
	}
	if err := db.WithContext(ctx).Raw(`SELECT d.tenant, d.channel FROM discrepancies d WHERE d.id = ?`, id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("finding %d's tenants: %w", id, err)
	}
	if len(rows) == 0 {
		return []string{AllTenants}, nil
	}
	if rows[0].Tenant != nil {
		return []string{*rows[0].Tenant}, nil
	}
	m, err := ChannelTenants(ctx, db, []string{rows[0].Channel})
	if err != nil {
		return nil, err
	}
	return m[rows[0].Channel], nil
}
