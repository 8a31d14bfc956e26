package cells

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// movedTable is a table whose rows of a tenant move with it: those with its tenant column, or
// those of its keys (key_id). Rows keep their ids (Open keeps each cell's ids in its own range).
type movedTable struct {
	Name string
	// ByKey: the table's rows of the tenant are those of its keys, not a tenant column.
	ByKey bool
}

// movedTables are copied in this order and deleted in the reverse one (a table's rows of the
// tenant found through its keys go before the keys). TestMovedTables_EveryTenantTableIsNamed
// fails when a table with a tenant or key_id column is in neither this list nor stayingTables.
var movedTables = []movedTable{
	{Name: "idempotency_keys"},
	{Name: "key_events", ByKey: true},
	{Name: "key_responses", ByKey: true},
	{Name: "key_answers", ByKey: true},
	{Name: "outbox", ByKey: true},
	{Name: "consumed_messages"},
	{Name: "one_time_tokens"},
	// The demo's own business tables (a service's domain rows live with its keys).
	{Name: "payments"},
	{Name: "fulfillments"},
	{Name: "shipping_notices"},
	{Name: "demo_orders"},
	{Name: "demo_order_transitions"},
	{Name: "demo_balances"},
	{Name: "demo_balance_adjustments"},
	{Name: "demo_likes"},
}

// fencedThroughKeys are the moved tables without a fence trigger of their own (migrations 00135,
// 00152 fence the others): every write of their rows is in the statement that writes their key's
// row, which idempotency_keys' fence judges. TestMovedTables_EveryMovedTableIsFenced fails for a
// moved table that is neither fenced nor named here.
var fencedThroughKeys = map[string]string{
	"key_responses": "written with its key's row only: a completion (a lease holder's), retention's tombstone or move of a day",
}

// stayingTables hold tenant rows that do not move, and why.
var stayingTables = map[string]string{
	"audit_log":              "the control cell's",
	"audit_refusals":         "the control cell's",
	"operator_tenants":       "the control cell's",
	"channel_accounts":       "the control cell's",
	"finding_bulk_runs":      "the control cell's (operators' bulk actions)",
	"replay_bulk_runs":       "the control cell's (operators' bulk actions)",
	"replay_bulk_items":      "the control cell's (operators' bulk actions)",
	"replay_requests":        "refers to operators and bulk runs of the control cell; an operator's replay of a moved key is asked again in its new cell",
	"discrepancies":          "reconciliation's findings belong to the statement import of the cell that matched it",
	"discrepancy_groups":     "counts of discrepancies (maintained by their trigger)",
	"key_history":            "a view of key_events and idempotency_keys",
	"statement_line_staging": "a COPY staging table, empty between imports",
	"channel_credentials":    "the control cell's (its key_id names a sealing key, not a key's row)",
	"cell_fences":            "each cell's own: the mover sets them",
	"cell_moves":             "the control cell's record of the moves",
	"key_counts":             "derived counts (costcurve, 00137): each cell folds its own from its keys; refold both after a move (MoveConfig.Moved)",
}

// keysOf selects the tenant's key ids, for a table whose rows are found through them.
const keysOf = `key_id IN (SELECT id FROM idempotency_keys WHERE tenant = %s)`

// where selects the tenant's rows of t (tenant is a quoted literal: COPY takes no parameters).
func (t movedTable) where(tenant string) string {
	if t.ByKey {
		return fmt.Sprintf(keysOf, tenant)
	}
	return "tenant = " + tenant
}

// quoteLiteral quotes s as a SQL string literal (standard_conforming_strings, the default since
// PostgreSQL 9.1; a tenant name is printable ASCII anyway).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tableShape is what the mover needs of a table: its columns as COPY writes them (stored
// generated columns are computed again in the target) and its primary key (the checksum's order).
type tableShape struct {
	Columns []string
	Key     []string
}

func shapeOf(ctx context.Context, conn *pgx.Conn, table string) (tableShape, error) {
	var s tableShape
	rows, err := conn.Query(ctx, `SELECT quote_ident(attname) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, table)
	if err != nil {
		return s, fmt.Errorf("columns of %s: %w", table, err)
	}
	if s.Columns, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return s, fmt.Errorf("columns of %s: %w", table, err)
	}
	rows, err = conn.Query(ctx, `SELECT quote_ident(a.attname) FROM pg_index i
		JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n`, table)
	if err != nil {
		return s, fmt.Errorf("primary key of %s: %w", table, err)
	}
	if s.Key, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return s, fmt.Errorf("primary key of %s: %w", table, err)
	}
	if len(s.Key) == 0 {
		s.Key = s.Columns
	}
	return s, nil
}

// sameShape refuses to move between cells whose schemas differ (one not migrated yet).
func sameShape(table string, a, b tableShape) error {
	if !slices.Equal(a.Columns, b.Columns) {
		return fmt.Errorf("table %s has other columns in the two cells (%s / %s): migrate both to the same version first",
			table, strings.Join(a.Columns, ","), strings.Join(b.Columns, ","))
	}
	return nil
}
