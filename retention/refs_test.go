package retention_test

import (
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

// Rows that refer to a key carry no foreign key (the purge does their work set-based): a purged
// key's replay requests and bulk items go with it, its outbox rows stay with key_id cleared, and
// nothing of a key that stays is touched.
func TestPurge_RowsReferringToAKeyFollowIt(t *testing.T) {
	b := setup(t)
	old := b.key("payment.charge", "old", claim.StateCompleted)
	kept := b.key("payment.charge", "kept", claim.StateCompleted)
	b.age(old, 31*day)
	var op int64
	if err := b.db.Raw(`INSERT INTO operators (name, password_hash, role) VALUES ('alice', 'x', 'operator') RETURNING id`).Scan(&op).Error; err != nil {
		t.Fatal(err)
	}
	var run int64
	if err := b.db.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, total) VALUES (?, 'alice', 'state=completed', 2) RETURNING id`, op).Scan(&run).Error; err != nil {
		t.Fatal(err)
	}
	for i, id := range []int64{old, kept} {
		var req int64
		if err := b.db.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
			reason, preview, needs_approval, state) VALUES (?, 't1', 'd', 1, ?, ?, 'alice', 'r', 'p', false, 'executed') RETURNING id`,
			id, []byte{byte(i)}, op).Scan(&req).Error; err != nil {
			t.Fatal(err)
		}
		pgtest.Exec(t, b.db, `INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted, request_id)
			VALUES (?, ?, ?, 1, 'completed', 'replay', ?)`, run, i, id, req)
		pgtest.Exec(t, b.db, `INSERT INTO outbox (key_id, operation, downstream_key, payload, state) VALUES (?, 'receipt.send', ?, '{}', 'sent')`,
			id, "dk-"+time.Now().Format(time.RFC3339Nano)+string(rune('a'+i)))
	}

	rep := b.purge(retention.Options{})

	if rep.Deleted != 1 || b.exists(old) || !b.exists(kept) {
		t.Fatalf("deleted %d (old exists %v, kept exists %v); want the old key only", rep.Deleted, b.exists(old), b.exists(kept))
	}
	for table, want := range map[string][2]int64{"replay_requests": {0, 1}, "replay_bulk_items": {0, 1}, "outbox": {0, 1}} {
		if n := b.count(`SELECT count(*) FROM `+table+` WHERE key_id = ?`, old); n != want[0] {
			t.Errorf("%s: %d rows still refer to the purged key", table, n)
		}
		if n := b.count(`SELECT count(*) FROM `+table+` WHERE key_id = ?`, kept); n != want[1] {
			t.Errorf("%s: %d rows of the kept key, want %d", table, n, want[1])
		}
	}
	if n := b.count(`SELECT count(*) FROM outbox WHERE key_id IS NULL`); n != 1 {
		t.Errorf("%d outbox rows with key_id cleared, want the purged key's one (sent messages stay)", n)
	}
}

// The tombstone pass leaves keys whose key period is over to the delete pass, except those the
// floor still keeps: their responses go all the same.
func TestPurge_KeyKeptByTheFloorStillLosesItsResponse(t *testing.T) {
	b := setup(t)
	short, err := claim.NewStore(b.db, claim.Config{DigestSecret: secret, Owner: "test", KeepResponse: time.Hour, KeepKey: 2 * day})
	if err != nil {
		t.Fatal(err)
	}
	b.store = short
	id := b.key("payment.charge", "short", claim.StateCompleted)
	b.age(id, 3*day) // key period (2 d) over, but younger than the floor

	rep := b.purge(retention.Options{})

	if !b.exists(id) {
		t.Fatal("a key younger than the floor was deleted")
	}
	if b.hasResponse(id) || rep.Tombstoned != 1 {
		t.Fatalf("response kept %v, tombstoned %d; want the response gone", b.hasResponse(id), rep.Tombstoned)
	}
}

// A batch reads its keys without row locks, so its delete checks every condition again on the
// row it deletes: a key that a concurrent writer puts on hold between the two is waited for and
// then kept, with its history.
func TestPurge_KeyChangedAfterItWasPickedIsCheckedAgain(t *testing.T) {
	b := setup(t)
	id := b.key("payment.charge", "contested", claim.StateCompleted)
	other := b.key("payment.charge", "plain", claim.StateCompleted)
	b.age(id, 31*day)
	b.age(other, 31*day)
	events := b.count(`SELECT count(*) FROM key_events WHERE key_id = ?`, id)

	writer := b.db.Begin()
	defer writer.Rollback()
	if err := writer.Exec(`UPDATE idempotency_keys SET legal_hold = true WHERE id = ?`, id).Error; err != nil {
		t.Fatal(err)
	}
	done := make(chan *retention.Report, 1)
	go func() { done <- b.purge(retention.Options{}) }()
	// Commit the hold once the purge's delete batch waits on the row. The batch is known by its
	// pick on expires_at near the start of its text: pg_stat_activity keeps only the first
	// track_activity_query_size (1 kB) of a statement, and the DELETE comes later.
	pgtest.AwaitLockWait(t, b.db, 10*time.Second, "k.expires_at >= ")
	if err := writer.Commit().Error; err != nil {
		t.Fatal(err)
	}
	rep := <-done

	if !b.exists(id) || b.exists(other) || rep.Deleted != 1 {
		t.Fatalf("held key exists %v (want kept), other exists %v (want gone), deleted %d", b.exists(id), b.exists(other), rep.Deleted)
	}
	if n := b.count(`SELECT count(*) FROM key_events WHERE key_id = ?`, id); n != events {
		t.Errorf("the kept key has %d events, had %d", n, events)
	}
}
