package retention_test

import (
	"fmt"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

// A day whose answers are all due goes with its key_responses partition, in one drop: the keys
// stay (a late retry is answered Expired, never executed), each shows its response_expired
// event, and the answer a legal hold keeps is moved to today's partition first.
func TestPurge_DropsADayOfAnswersWholesaleKeepingHeldOnes(t *testing.T) {
	b := setup(t)
	seedExpired(t, b.db, "payment.charge", 20, 0, 10*day)
	// Another day, nothing kept: dropped without reading its keys.
	seedExpired(t, b.db, "payment.refund", 5, 0, 12*day)
	var dayName string
	var held int64
	if err := b.db.Raw(`SELECT 'key_responses_' || to_char(response_day, 'YYYYMMDD') FROM idempotency_keys WHERE tenant = 'seed' LIMIT 1`).
		Scan(&dayName).Error; err != nil {
		t.Fatal(err)
	}
	if err := b.db.Raw(`SELECT min(id) FROM idempotency_keys WHERE tenant = 'seed'`).Scan(&held).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := retention.SetLegalHold(b.ctx, b.db, held, true, "operator:alice", "audit"); err != nil {
		t.Fatal(err)
	}
	// A key of the service's own, answered on that day too.
	late := b.key("payment.charge", "late", claim.StateCompleted)
	pgtest.Exec(t, b.db, `UPDATE key_responses SET day = (SELECT response_day FROM idempotency_keys WHERE tenant = 'seed' LIMIT 1) WHERE key_id = ?`, late)
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET response_day = (SELECT response_day FROM idempotency_keys WHERE tenant = 'seed' LIMIT 1) WHERE id = ?`, late)
	b.age(late, 10*day)
	young := b.key("payment.charge", "young", claim.StateCompleted)

	rep := b.purge(retention.Options{})

	if n := b.count(`SELECT count(*) FROM pg_class WHERE relname = ?`, dayName); n != 0 {
		t.Fatalf("partition %s still there", dayName)
	}
	if rep.Tombstoned != 25 || rep.Deleted != 0 || !rep.Complete {
		t.Errorf("report: tombstoned %d (want 25: 19 + 5 seeded and late), deleted %d, complete %v", rep.Tombstoned, rep.Deleted, rep.Complete)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys k JOIN key_responses r ON r.key_id = k.id AND r.day = k.response_day
		WHERE k.operation = 'payment.refund'`); n != 0 {
		t.Errorf("%d refund answers left", n)
	}
	if !b.hasResponse(held) || !b.hasResponse(young) || b.hasResponse(late) {
		t.Errorf("answers: held %v (want kept), young %v (want kept), late %v (want gone)", b.hasResponse(held), b.hasResponse(young), b.hasResponse(late))
	}
	out, err := b.store.Claim(b.ctx, request("payment.charge", "late"))
	if err != nil || out.Kind != claim.Expired || out.ResourceID != "r-late" {
		t.Fatalf("late retry: %+v %v, want Expired with its resource", out, err)
	}
	evs, err := b.store.History(b.ctx, late, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Kind != "response_expired" || last.Actor != "operator:test" {
		t.Errorf("last event of the dropped key: %+v", last)
	}
	if n := b.count(`SELECT count(*) FROM key_history WHERE kind = 'response_expired'`); n != 25 {
		t.Errorf("%d response_expired events, want 25", n)
	}
	if n := b.count(`SELECT count(*) FROM key_events WHERE kind = 'response_expired'`); n != 0 {
		t.Errorf("%d response_expired events stored as rows, want none (one drop row for the day)", n)
	}
	// The day is not created again ahead, and a second purge changes nothing.
	if err := claim.EnsureResponsePartitions(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if rep := b.purge(retention.Options{}); rep.Tombstoned != 0 || !b.hasResponse(held) {
		t.Errorf("second purge tombstoned %d", rep.Tombstoned)
	}
}

// Answers due on a day that cannot be dropped yet (today's, still written to) go row by row.
func TestPurge_DueAnswersOfTodayGoRowByRow(t *testing.T) {
	b := setup(t)
	k := b.key("payment.charge", "k", claim.StateCompleted)
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET response_expires_at = now() - interval '1 hour' WHERE id = ?`, k)

	rep := b.purge(retention.Options{})

	if rep.Tombstoned != 1 || b.hasResponse(k) {
		t.Fatalf("tombstoned %d, answer kept %v", rep.Tombstoned, b.hasResponse(k))
	}
	if n := b.count(`SELECT count(*) FROM key_events WHERE key_id = ? AND kind = 'response_expired'`, k); n != 1 {
		t.Errorf("%d response_expired events, want 1", n)
	}
}

// A drop detaches the day under the parent's lock and drops its table after commit; a table a
// purge detached and then never dropped (its process died in between) goes with the next purge,
// and nothing else does: not an attached day (one made ahead), not a table of another name.
func TestPurge_DropsDayTablesLeftDetached(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `CREATE TABLE key_responses_20200101 PARTITION OF key_responses FOR VALUES FROM ('2020-01-01') TO ('2020-01-02')`)
	pgtest.Exec(t, b.db, `ALTER TABLE key_responses DETACH PARTITION key_responses_20200101`)
	// A day made far ahead, attached: not the purge's to touch.
	pgtest.Exec(t, b.db, `CREATE TABLE key_responses_20990101 PARTITION OF key_responses FOR VALUES FROM ('2099-01-01') TO ('2099-01-02')`)
	pgtest.Exec(t, b.db, `CREATE TABLE key_responses_archive (LIKE key_responses)`)

	b.purge(retention.Options{})

	for name, want := range map[string]int64{"key_responses_20200101": 0, "key_responses_20990101": 1, "key_responses_archive": 1} {
		if n := b.count(`SELECT count(*) FROM pg_class WHERE relname = ?`, name); n != want {
			t.Errorf("%s: %d tables, want %d", name, n, want)
		}
	}
}

// A database made on an earlier day has empty day tables from before yesterday (the migration and
// the claim store make them from yesterday on, by the clock of their day): a purge drops such a
// day and reports no count for it — not an entry for no operation with 0 answers, which made the
// real run's counts differ from its dry run's whenever the suite's template database was made
// before midnight UTC and the test ran after it (TestDryRun_ChangesNothingAndMatchesTheRun).
func TestPurge_EmptyDayFromBeforeYesterdayIsDroppedWithoutACount(t *testing.T) {
	b := setup(t)
	var day string
	if err := b.db.Raw(`SELECT to_char((now() AT TIME ZONE 'UTC')::date - 3, 'YYYYMMDD')`).Scan(&day).Error; err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, b.db, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS key_responses_%s PARTITION OF key_responses
		FOR VALUES FROM (to_date('%s', 'YYYYMMDD')) TO (to_date('%s', 'YYYYMMDD') + 1)`, day, day, day))

	rep := b.purge(retention.Options{})

	if n := b.count(`SELECT count(*) FROM pg_class WHERE relname = ?`, "key_responses_"+day); n != 0 {
		t.Errorf("the empty day %s is still there", day)
	}
	if rep.Tombstoned != 0 || len(rep.TombstonedBy) != 0 {
		t.Errorf("tombstoned %d, by %v; want nothing counted for an empty day", rep.Tombstoned, rep.TombstonedBy)
	}
}
