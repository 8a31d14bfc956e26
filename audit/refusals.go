package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/tenantdb"
)

// Refusals are counted, not each written: a refused action (out of the actor's scope, a role too
// low) bumps one count per actor, action and minute in audit_refusals, and once that minute is
// over the count becomes one chained row (SealRefusals) — so a viewer who sends 200 forbidden
// requests in a minute costs the chain one row saying 200, not 200 rows, and its lock is taken
// once a minute instead of at every request. The counts of the current minute are outside the
// chain until they are sealed: a deletion of them in that minute is not detected.

// Refused counts one refusal of e: e.Actor's e.Action (the route or the refused action,
// "…_refused"), with e.Detail["reason"] and e.Target kept from the minute's first refusal and
// e.Target of its last. The first refusal of a new count seals the minutes that are over.
func (a *Log) Refused(ctx context.Context, e Entry) error {
	if a.key == nil {
		return fmt.Errorf("audit %s: %w", e.Action, ErrNoKey)
	}
	reason, _ := e.Detail["reason"].(string)
	tenants, _ := json.Marshal(NormalizeTenants(e.Tenants))
	var rows []struct{ Inserted bool }
	// xmax is 0 on a row this statement inserted, the updating transaction's id on one it updated.
	if err := a.db.WithContext(ctx).Raw(`INSERT INTO audit_refusals AS r (actor, action, minute, tenants, ip, target, last_target, reason)
		VALUES (?, ?, date_trunc('minute', now()), ARRAY(SELECT jsonb_array_elements_text(?::jsonb)), ?, ?, ?, ?)
		ON CONFLICT (actor, action, minute) DO UPDATE SET count = r.count + 1, last_at = now(), last_target = EXCLUDED.last_target
		RETURNING (r.xmax = 0) AS inserted`, e.Actor, e.Action, string(tenants), e.IP, e.Target, e.Target, reason).Scan(&rows).Error; err != nil {
		return fmt.Errorf("count refusal %s: %w", e.Action, err)
	}
	if len(rows) == 1 && rows[0].Inserted {
		if _, err := a.SealRefusals(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sealBatch bounds the counts one SealRefusals turns into rows.
const sealBatch = 500

// refusalCount is a row of audit_refusals.
type refusalCount struct {
	Actor, Action      string
	Minute             time.Time
	Tenants            TenantSet
	IP, Target, Reason string
	LastTarget         string
	Count              int64
	FirstAt, LastAt    time.Time
}

// SealRefusals appends one chained row for each count of a minute that is over (action as
// counted; detail: reason, count, minute, first and last time, last target when it differs) and
// removes the counts it sealed, oldest minute first, at most sealBatch at a time. It returns how
// many rows it appended. The console calls it when a new count starts and before showing the
// log; the daemon every time it verifies the chain.
func (a *Log) SealRefusals(ctx context.Context) (int, error) {
	if a.key == nil {
		return 0, fmt.Errorf("audit seal refusals: %w", ErrNoKey)
	}
	// Every actor's counts: sealing is the log's own work, not the reader's (past row-level
	// security, as Verify walks the chain).
	ctx = tenantdb.WithTenants(ctx, []string{tenantdb.AllTenants})
	var due []refusalCount
	err := a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(`DELETE FROM audit_refusals WHERE (actor, action, minute) IN (
				SELECT actor, action, minute FROM audit_refusals WHERE minute < date_trunc('minute', now())
				ORDER BY minute LIMIT ? FOR UPDATE SKIP LOCKED)
			RETURNING actor, action, minute, array_to_json(tenants)::text AS tenants, ip, target, last_target, reason,
				count, first_at, last_at`, sealBatch).Scan(&due).Error; err != nil {
			return err
		}
		// As they happened: by minute, then first refusal.
		slices.SortFunc(due, func(x, y refusalCount) int {
			if c := x.Minute.Compare(y.Minute); c != 0 {
				return c
			}
			return x.FirstAt.Compare(y.FirstAt)
		})
		for _, r := range due {
			detail := map[string]any{"reason": r.Reason, "count": r.Count, "minute": r.Minute.UTC().Format(time.RFC3339),
				"first_at": r.FirstAt.UTC().Format(time.RFC3339Nano), "last_at": r.LastAt.UTC().Format(time.RFC3339Nano)}
			if r.LastTarget != r.Target {
				detail["last_target"] = r.LastTarget
			}
			if err := a.Append(ctx, tx, Entry{Actor: r.Actor, IP: r.IP, Action: r.Action, Target: r.Target,
				Tenants: r.Tenants, Detail: detail}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("audit seal refusals: %w", err)
	}
	return len(due), nil
}
