package cells_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
)

// fencedWrite is one writer of a moved table (besides the keys and the consumers' dedup rows,
// whose fences claim's tests cover): a statement writing row n of @tenant (its key @key), and a
// count of the rows of @tenant the test wrote there.
type fencedWrite struct {
	table, write, count string
	// skipped: a refused row is left out, not an error (the answer recorder's flush carries
	// every tenant's counts in one statement).
	skipped bool
}

var fencedWrites = []fencedWrite{
	{table: "key_events", write: `INSERT INTO key_events (key_id, kind, actor, detail) VALUES (@key, 'fence_test', 'operator:test', jsonb_build_object('n', CAST(@n AS int)))`,
		count: `SELECT count(*) FROM key_events WHERE key_id = @key AND kind = 'fence_test'`},
	{table: "outbox", write: `INSERT INTO outbox (key_id, operation, downstream_key, payload) VALUES (@key, 'fence_test', @tenant || '-' || CAST(@n AS text), '{}')`,
		count: `SELECT count(*) FROM outbox WHERE key_id = @key AND operation = 'fence_test'`},
	{table: "key_answers", skipped: true, write: `INSERT INTO key_answers (key_id, kind, status, count, first_at, last_at) VALUES (@key, 'replay', 200 + CAST(@n AS int), 1, now(), now())`,
		count: `SELECT count(*) FROM key_answers WHERE key_id = @key`},
	{table: "one_time_tokens", write: `INSERT INTO one_time_tokens (token_hash, tenant, operation, expires_at) VALUES (@tenant || '-' || CAST(@n AS text), @tenant, 'checkout', now() + interval '1 hour')`,
		count: `SELECT count(*) FROM one_time_tokens WHERE tenant = @tenant`},
	{table: "payments", write: `INSERT INTO payments (id, tenant, key_id, merchant_order_no, payee, amount_minor, currency, status)
		VALUES (@tenant || '-' || CAST(@n AS text), @tenant, @key, 'mo', 'payee', 100, 'CNY', 'succeeded')`,
		count: `SELECT count(*) FROM payments WHERE tenant = @tenant`},
	{table: "fulfillments", write: `INSERT INTO fulfillments (payment_id, tenant, amount_minor, currency) VALUES (@tenant || '-' || CAST(@n AS text), @tenant, 100, 'CNY')`,
		count: `SELECT count(*) FROM fulfillments WHERE tenant = @tenant`},
	{table: "shipping_notices", write: `INSERT INTO shipping_notices (payment_id, tenant, notification) VALUES (@tenant || '-' || CAST(@n AS text), @tenant, 'shipped')`,
		count: `SELECT count(*) FROM shipping_notices WHERE tenant = @tenant`},
	{table: "demo_orders", write: `INSERT INTO demo_orders (merchant_order_no, tenant, key_id, payment_id, amount_minor, currency, status)
		VALUES (@tenant || '-' || CAST(@n AS text), @tenant, @key, 'p', 100, 'CNY', 'pending')`,
		count: `SELECT count(*) FROM demo_orders WHERE tenant = @tenant`},
	{table: "demo_order_transitions", write: `INSERT INTO demo_order_transitions (merchant_order_no, tenant, event_id, event_type, from_status, to_status, outcome)
		VALUES (@tenant || '-1', @tenant, 'ev-' || CAST(@n AS text), 'paid', 'pending', 'paid', 'applied')`,
		count: `SELECT count(*) FROM demo_order_transitions WHERE tenant = @tenant`},
	{table: "demo_balances", write: `INSERT INTO demo_balances (id, tenant, currency, balance_minor) VALUES (@tenant || '|C' || CAST(@n AS text), @tenant, 'C' || CAST(@n AS text), 100)`,
		count: `SELECT count(*) FROM demo_balances WHERE tenant = @tenant`},
	{table: "demo_balance_adjustments", write: `INSERT INTO demo_balance_adjustments (tenant, key_id, amount_minor, currency, reason)
		VALUES (@tenant, CAST(@key AS bigint) * 10 + CAST(@n AS bigint), -100, 'CNY', 'refund')`,
		count: `SELECT count(*) FROM demo_balance_adjustments WHERE tenant = @tenant`},
	{table: "demo_likes", write: `INSERT INTO demo_likes (tenant, article_id, user_id) VALUES (@tenant, 'article', 'user-' || CAST(@n AS text))`,
		count: `SELECT count(*) FROM demo_likes WHERE tenant = @tenant`},
}

// fenceCells is a test's two cells (a: acme, initech; b: globex) and their map's path.
func fenceCells(t *testing.T) (path string, a, b *cells.Cell) {
	t.Helper()
	t.Parallel()
	path = twoCells(t)
	set := open(t, path)
	a, _ = set.Cell("a")
	b, _ = set.Cell("b")
	return path, a, b
}

// moveAcme moves acme from a to b (a drain of 10 ms: a lease left is revoked), stopping after
// stopAfter ("": to the end).
func moveAcme(t *testing.T, path string, stopAfter cells.Step) {
	t.Helper()
	m, err := cells.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: "acme", To: "b", Audit: auditIn("acme"),
		DrainTimeout: 10 * time.Millisecond, StopAfter: stopAfter})
	if stopAfter != "" && !errors.Is(err, cells.ErrStopped) || stopAfter == "" && err != nil {
		t.Fatalf("move (stop after %q): %v", stopAfter, err)
	}
}

// claimKey claims key for tenant in cell c, completed (201) when complete, and returns its id.
func claimKey(t *testing.T, c *cells.Cell, tenant, key string, complete bool) int64 {
	t.Helper()
	ctx := context.Background()
	out, err := c.Store.Claim(ctx, claim.Request{Tenant: tenant, Operation: "charge", Key: key, Intent: []byte(`{"amount":1}`), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim %s of %s: %v %v", key, tenant, out, err)
	}
	if complete {
		if err := c.Store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return out.KeyID
}

// isFenced reports whether err is the fence's refusal (SQLSTATE IF001).
func isFenced(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "IF001"
}

// TestMoveFences_EveryMovedTablesWriteIsRefusedFromTheSealAndNoneIsLost: each writer of a table
// the move copies — the demo's orders, transitions, balances, payments, tokens, likes; a key's
// events, outbox rows and answer counts — may write a frozen tenant's rows until the mover seals
// the fence (those rows are in the copy), is refused from then on in the source, in the target
// until the switch, and in the source after it; another tenant's writes go on. Every write that
// was taken is in the tenant's new cell, none is left behind.
func TestMoveFences_EveryMovedTablesWriteIsRefusedFromTheSealAndNoneIsLost(t *testing.T) {
	path, a, b := fenceCells(t)
	keys := map[string]int64{}
	for _, tenant := range []string{"acme", "initech"} {
		keys[tenant] = claimKey(t, a, tenant, "k", true)
	}
	args := func(tenant string, n int) map[string]any {
		return map[string]any{"tenant": tenant, "key": keys[tenant], "n": fmt.Sprint(n)} // n as text: each use casts it
	}
	write := func(c *cells.Cell, w fencedWrite, tenant string, n int) (rows int64, err error) {
		res := c.DB.Exec(w.write, args(tenant, n))
		return res.RowsAffected, res.Error
	}
	// taken: the write went in. refused: it was refused, or (skipped) left out, writing nothing.
	taken := func(when string, c *cells.Cell, w fencedWrite, tenant string, n int) {
		t.Helper()
		if rows, err := write(c, w, tenant, n); err != nil || rows != 1 {
			t.Errorf("%s: %s's write of %s in %s: %d rows, %v; want it taken", when, tenant, w.table, c.Name, rows, err)
		}
	}
	refused := func(when string, c *cells.Cell, w fencedWrite, tenant string, n int) {
		t.Helper()
		rows, err := write(c, w, tenant, n)
		switch {
		case w.skipped && err == nil && rows == 0:
		case !w.skipped && isFenced(err):
		default:
			t.Errorf("%s: %s's write of %s in %s: %d rows, %v; want it refused by the fence", when, tenant, w.table, c.Name, rows, err)
		}
	}
	count := func(c *cells.Cell, w fencedWrite, tenant string) int64 {
		t.Helper()
		var n int64
		if err := c.DB.Raw(w.count, args(tenant, 0)).Scan(&n).Error; err != nil {
			t.Fatalf("%s: %v", w.count, err)
		}
		return n
	}

	for _, w := range fencedWrites {
		taken("before the move", a, w, "acme", 1)
		taken("before the move", a, w, "initech", 1)
	}
	moveAcme(t, path, cells.StepDrained) // frozen, its leases drained: not sealed yet
	for _, w := range fencedWrites {
		taken("frozen before the seal", a, w, "acme", 2)
	}
	moveAcme(t, path, cells.StepCopied) // sealed, copied
	for _, w := range fencedWrites {
		refused("sealed", a, w, "acme", 3)
		refused("incoming", b, w, "acme", 3)
		taken("while acme is sealed", a, w, "initech", 3)
	}
	moveAcme(t, path, "")
	for _, w := range fencedWrites {
		if got := count(b, w, "acme"); got != 2 {
			t.Errorf("%s: %d of acme's rows in b, want the 2 written before the seal", w.table, got)
		}
		if got := count(a, w, "acme"); got != 0 {
			t.Errorf("%s: %d of acme's rows left in a", w.table, got)
		}
		if got := count(a, w, "initech"); got != 2 {
			t.Errorf("%s: %d of initech's rows in a, want 2", w.table, got)
		}
		taken("after the switch", b, w, "acme", 4)
	}
	// In the source, acme is gone: a row of it (its keys are gone too: rows of a tenant column).
	for _, w := range fencedWrites {
		if w.table != "key_events" && w.table != "outbox" && w.table != "key_answers" {
			refused("gone", a, w, "acme", 5)
		}
	}
}

// TestMoveFences_AnAnswerIsWrittenWithItsKeyAndFencedWithIt: key_responses has no fence of its
// own (cells' fencedThroughKeys): its writers write the key's row in the same statement — as
// retention's tombstone does here — and the keys' fence refuses that while the tenant is frozen.
func TestMoveFences_AnAnswerIsWrittenWithItsKeyAndFencedWithIt(t *testing.T) {
	path, a, b := fenceCells(t)
	keyID := claimKey(t, a, "acme", "k", true)
	answer := func(db *gorm.DB, status int) error {
		return db.Exec(`WITH u AS (UPDATE idempotency_keys SET updated_at = now() WHERE id = ? RETURNING id)
			UPDATE key_responses SET status = ? WHERE key_id IN (SELECT id FROM u)`, keyID, status).Error
	}
	if err := answer(a.DB, 202); err != nil {
		t.Fatal(err)
	}
	moveAcme(t, path, cells.StepFenced)
	if err := answer(a.DB, 203); !isFenced(err) {
		t.Errorf("frozen: the answer's write: %v, want the fence's refusal", err)
	}
	moveAcme(t, path, "")
	var status int
	if err := b.DB.Raw(`SELECT status FROM key_responses WHERE key_id = ?`, keyID).Scan(&status).Error; err != nil || status != 202 {
		t.Errorf("acme's answer in b: %d %v, want 202 (the write taken before the fence)", status, err)
	}
	if got := fmt.Sprint(count(t, a.DB, `SELECT count(*) FROM key_responses WHERE key_id = ?`, keyID)); got != "0" {
		t.Errorf("%s answers of acme's key left in a", got)
	}
}

// TestMoveFences_AnOperatorsWriteOfARevokedKeyIsRefusedOnceSealed: the keys' own fence leaves a
// write that clears a lease token to the lease holder (its WHEN), so an operator's release of a
// key whose lease the mover revoked passes it; the event every operator transition records
// with it is refused from the seal, and the release with it — the key moves as the mover left
// it, to be taken over in its new cell.
func TestMoveFences_AnOperatorsWriteOfARevokedKeyIsRefusedOnceSealed(t *testing.T) {
	path, a, b := fenceCells(t)
	keyID := claimKey(t, a, "acme", "held", false)
	moveAcme(t, path, cells.StepCopied) // the held lease revoked after the drain, the fence sealed
	// The shape of keys.ReleaseForRetry: the key returned to failed_retryable, and its event.
	err := a.DB.Exec(`WITH u AS (
		UPDATE idempotency_keys SET state = 'failed_retryable', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
			version = version + 1, updated_at = now()
		WHERE id = ? AND state = 'processing' AND lease_expires_at < now() RETURNING id)
		INSERT INTO key_events (key_id, kind, actor, detail) SELECT id, 'released_for_retry', 'operator:test', '{}' FROM u`, keyID).Error
	if !isFenced(err) {
		t.Fatalf("an operator's release of the revoked key after the seal: %v, want the fence's refusal", err)
	}
	moveAcme(t, path, "")
	var state string
	if err := b.DB.Raw(`SELECT state FROM idempotency_keys WHERE id = ?`, keyID).Scan(&state).Error; err != nil || state != string(claim.StateProcessing) {
		t.Errorf("the key in b: %q %v, want processing (revoked, for b's reclaimer)", state, err)
	}
}

// TestMoveFences_NoWriteOfARevokedKeyLandsAfterTheSeal: the keys' own fence leaves the writes of
// a key's lease holder (renew, complete, fail: the token kept or cleared) to the lease — but the
// token of a key whose lease the mover revoked is held by nobody, so any later write of the key
// is someone else's. Those writes — clearing the token, keeping it, deleting the key, with no
// event to refuse them along — are refused by the keys' fence: in the source once frozen, in the
// target until the switch. The key moves as the mover left it; another tenant's keys are
// written as before.
func TestMoveFences_NoWriteOfARevokedKeyLandsAfterTheSeal(t *testing.T) {
	path, a, b := fenceCells(t)
	keyID := claimKey(t, a, "acme", "held", false)
	other := claimKey(t, a, "initech", "held", false)
	moveAcme(t, path, cells.StepCopied) // the held lease revoked after the drain, the fence sealed
	writes := []struct{ name, sql string }{
		{"a release clearing the token", `UPDATE idempotency_keys SET state = 'failed_retryable', lease_owner = NULL, lease_token = NULL,
			lease_expires_at = NULL, version = version + 1, updated_at = now() WHERE id = ?`},
		{"a write keeping the token", `UPDATE idempotency_keys SET needs_attention = true, updated_at = now() WHERE id = ?`},
		{"a delete", `DELETE FROM idempotency_keys WHERE id = ?`},
	}
	// Each write in a transaction rolled back after it: each is judged on the key as the mover
	// left it.
	errUndo := errors.New("undo")
	write := func(c *cells.Cell, sql string, id int64) error {
		err := c.DB.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(sql, id).Error; err != nil {
				return err
			}
			return errUndo
		})
		if errors.Is(err, errUndo) {
			return nil
		}
		return err
	}
	for _, w := range writes {
		for _, c := range []*cells.Cell{a, b} {
			if err := write(c, w.sql, keyID); !isFenced(err) {
				t.Errorf("%s of acme's revoked key in %s after the seal: %v, want the fence's refusal", w.name, c.Name, err)
			}
		}
		if err := write(a, w.sql, other); err != nil {
			t.Errorf("%s of initech's held key in a: %v, want it taken", w.name, err)
		}
	}
	moveAcme(t, path, "")
	var k struct {
		State          string
		NeedsAttention bool
		LeaseOwner     string
	}
	if err := b.DB.Raw(`SELECT state, needs_attention, lease_owner FROM idempotency_keys WHERE id = ?`, keyID).Scan(&k).Error; err != nil ||
		k.State != string(claim.StateProcessing) || k.NeedsAttention || k.LeaseOwner != cells.RevokedBy {
		t.Errorf("the key in b: %+v %v, want processing, revoked by the mover, untouched since (for b's reclaimer)", k, err)
	}
}

// TestMoveFences_AStalledHoldersLateCompletionIsLeaseLost: a holder whose lease expired before
// the move (stalled, nobody took the key over: the source's reclaimer leaves a fenced tenant
// alone) still holds its token, and a holder's completion is left to the token, not the clock.
// The mover revokes it with the live ones, so a completion after the seal is lease lost — it
// would otherwise land in the source after the copy and be deleted with it — and the key moves
// as processing, for the target's reclaimer to take over looking downstream up first.
func TestMoveFences_AStalledHoldersLateCompletionIsLeaseLost(t *testing.T) {
	path, a, b := fenceCells(t)
	ctx := context.Background()
	out, err := a.Store.Claim(ctx, claim.Request{Tenant: "acme", Operation: "charge", Key: "stalled", Intent: []byte(`{"amount":1}`), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %v %v", out, err)
	}
	if err := a.DB.Exec(`UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id = ?`, out.KeyID).Error; err != nil {
		t.Fatal(err)
	}
	moveAcme(t, path, cells.StepCopied)
	if err := a.Store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("the stalled holder's completion after the seal: %v, want lease lost", err)
	}
	moveAcme(t, path, "")
	var state string
	if err := b.DB.Raw(`SELECT state FROM idempotency_keys WHERE id = ?`, out.KeyID).Scan(&state).Error; err != nil || state != string(claim.StateProcessing) {
		t.Errorf("the key in b: %q %v, want processing (for b's reclaimer)", state, err)
	}
}
