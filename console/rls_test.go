package console

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/keys"
)

// Row-level security is a second wall behind the Go scope checks (issue 35 item 9): with the key
// search's Go scope dropped on purpose (goScopeOff: the search asks for every tenant's keys), an
// operator of acme still gets acme's keys only, on the page and through the API, because the
// console's handle runs the search under acme alone. The same search on the tables' owner handle
// (no row-level security) does return globex's key: the dropped check is a real leak without it.
func TestRowLevelSecurity_HidesOtherTenantsKeysWhenAGoScopeCheckIsDropped(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "acme")
	mine := b.seedKey("acme", "payment.charge", "acme-visible-1", `{"amount":1,"currency":"USD"}`, true)
	theirs := b.seedKey("globex", "payment.charge", "globex-hidden-1", `{"amount":2,"currency":"USD"}`, true)
	b.srv.goScopeOff = true

	leaked, _, err := keys.SearchKeys(context.Background(), b.db, b.srv.keyScope(b.ops["v"]), KeyFilter{Limit: PageSize})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaked) != 2 {
		t.Fatalf("without row-level security the unscoped search returns %d keys, want both tenants' 2", len(leaked))
	}

	c := b.signIn("v")
	page := c.get("/keys")
	if page.Status != 200 {
		t.Fatalf("/keys: %d", page.Status)
	}
	mustContain(t, "key list", page.Body, fmt.Sprintf(`href="/keys/%d"`, mine.ID))
	mustNotContain(t, "key list", page.Body, fmt.Sprintf(`href="/keys/%d"`, theirs.ID), "globex")
	tok := b.token("v")
	api := c.api("/api/v1/keys", tok)
	if api.Status != 200 || !strings.Contains(api.Body, `"tenant":"acme"`) || strings.Contains(api.Body, "globex") {
		t.Errorf("api keys: %d %s", api.Status, api.Body)
	}
}

// Every tenant table has a policy: under acme's tenants the console's handle sees none of
// globex's rows in any of them (keys and their holds, events, answers, findings and their groups,
// findings' bulk runs and items, statements and their lines, replays, bulk
// runs and items, audit rows and uncounted refusals), and all of them under "*".
func TestRowLevelSecurity_EveryTenantTableHidesOtherTenantsRows(t *testing.T) {
	b := setup(t)
	g := b.seedKey("globex", "payment.charge", "globex-rows-1", `{"amount":2,"currency":"USD"}`, true)
	boss := b.addOperator("boss", access.RoleAdmin, "*")
	b.exec(`UPDATE idempotency_keys SET legal_hold = true WHERE id = ?`, g.ID)
	b.exec(`INSERT INTO key_events (key_id, kind, actor) VALUES (?, 'revealed', 'operator:boss')`, g.ID)
	b.exec(`INSERT INTO key_answers (key_id, kind, status, count, first_at, last_at) VALUES (?, 'replay', 200, 1, now(), now())`, g.ID)
	b.exec(`INSERT INTO channel_accounts (channel, tenants, updated_by) VALUES ('gx-pay', '{globex}', 'test')`)
	b.exec(`INSERT INTO statements (channel, bill_date, format, sha256, version, row_count, total_minor, bytes, summary, importer)
		VALUES ('gx-pay', '2024-03-01', 'csv', 'sha-gx', 1, 1, 2, 10, '{}', 'test')`)
	b.exec(`INSERT INTO statement_lines (statement_id, line_no, channel_txn_id, merchant_order_no, amount_minor, currency, status, occurred_at, raw)
		SELECT id, 1, 'txn-1', 'order-1', 2, 'USD', 'SUCCESS', now(), '' FROM statements WHERE channel = 'gx-pay'`)
	b.exec(`INSERT INTO recon_runs (channel, bill_date, actor) VALUES ('gx-pay', '2024-03-01', 'test')`)
	b.exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id, detail)
		SELECT id, id, 'gx-pay', '2024-03-01', 'LOCAL_ONLY', 'k', ?, '{}' FROM recon_runs WHERE channel = 'gx-pay'`, g.ID)
	b.exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail)
		SELECT id, id, 'gx-pay', '2024-03-01', 'CHANNEL_ONLY', 'c', '{}' FROM recon_runs WHERE channel = 'gx-pay'`)
	b.exec(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, total, tenants) VALUES (?, 'boss', '', 1, '{*}')`, boss.ID)
	b.exec(`INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted)
		SELECT id, 1, ?, 1, 'completed', 'found' FROM replay_bulk_runs`, g.ID)
	b.exec(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester, reason,
		preview, needs_approval, state) VALUES (?, 'globex', ?, 1, '\\x01', ?, 'boss', 'r', 'found', false, 'refused')`, g.ID, g.KeyDigest, boss.ID)
	b.exec(`INSERT INTO finding_bulk_runs (action, reason_code, filter, operator_id, operator, tenants, state, total)
		VALUES ('ignore', 'test_file', '{}', ?, 'boss', '{globex}', 'done', 1)`, boss.ID)
	b.exec(`INSERT INTO finding_bulk_items (run_id, finding_id) SELECT r.id, d.id FROM finding_bulk_runs r, discrepancies d WHERE d.key_id IS NOT NULL`)
	b.exec(`INSERT INTO audit_refusals (actor, action, minute, tenants) VALUES ('operator:g', 'key.reveal_refused', date_trunc('minute', now()), '{globex}')`)
	if err := b.srv.audit.Append(context.Background(), nil, audit.Entry{Actor: "operator:boss", Action: "key.reveal",
		Target: fmt.Sprintf("key:%d", g.ID), Tenants: []string{"globex"}}); err != nil {
		t.Fatal(err)
	}
	tables := []string{"idempotency_keys", "idempotency_keys WHERE legal_hold", "key_events", "key_history", "key_answers", "key_responses",
		"discrepancies", "discrepancy_groups", "finding_bulk_runs", "finding_bulk_items", "statements", "statement_lines",
		"replay_requests", "replay_bulk_runs", "replay_bulk_items", "audit_log", "audit_refusals"}
	for _, table := range tables {
		if n := b.count(`SELECT count(*) FROM ` + table); n == 0 {
			t.Fatalf("%s: no row seeded", table)
		}
		var n int64
		acme := tenantdb.WithTenants(context.Background(), []string{"acme"})
		if err := b.srv.db.WithContext(acme).Raw(`SELECT count(*) FROM ` + table).Scan(&n).Error; err != nil {
			t.Fatalf("%s under acme: %v", table, err)
		}
		if n != 0 {
			t.Errorf("%s: acme sees %d of globex's rows", table, n)
		}
		all := tenantdb.WithTenants(context.Background(), []string{"*"})
		if err := b.srv.db.WithContext(all).Raw(`SELECT count(*) FROM ` + table).Scan(&n).Error; err != nil || n == 0 {
			t.Errorf("%s under *: %d rows (%v), want all", table, n, err)
		}
	}
}
