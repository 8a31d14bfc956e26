package retention_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/retention"
)

func TestPurge_DeletesExpiredKeysWithTheirEvents(t *testing.T) {
	b := setup(t)
	old := b.key("payment.charge", "old", claim.StateCompleted)
	young := b.key("payment.charge", "young", claim.StateCompleted)
	b.age(old, 31*day)
	if b.count(`SELECT count(*) FROM key_history WHERE key_id = ?`, old) == 0 {
		t.Fatal("set-up: the old key has no events")
	}

	rep := b.purge(retention.Options{})

	if b.exists(old) || !b.exists(young) {
		t.Fatalf("old exists %v (want gone), young exists %v (want kept)", b.exists(old), b.exists(young))
	}
	if n := b.count(`SELECT count(*) FROM key_history WHERE key_id = ?`, old); n != 0 {
		t.Errorf("%d events of the deleted key remain", n)
	}
	if rep.Deleted != 1 || rep.DeletedBy["payment.charge"][claim.StateCompleted] != 1 || !rep.Complete {
		t.Errorf("report: deleted %d, by %v, complete %v", rep.Deleted, rep.DeletedBy, rep.Complete)
	}
	runs, err := retention.PurgeHistory(b.ctx, b.db, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != "ok" || runs[0].Deleted != 1 || runs[0].DryRun || runs[0].Actor != "operator:test" || runs[0].FinishedAt == nil {
		t.Fatalf("purge log: %+v", runs)
	}
	var counts struct {
		Deleted map[string]map[string]int64 `json:"deleted"`
	}
	if err := json.Unmarshal(runs[0].Counts, &counts); err != nil || counts.Deleted["payment.charge"]["completed"] != 1 {
		t.Errorf("purge log counts %s (%v)", runs[0].Counts, err)
	}
}

func TestPurge_NeverTouchesProcessingKeys(t *testing.T) {
	b := setup(t)
	// A key that failed retryably long ago and was retried: processing again, still carrying
	// the expiry stamps of its failure…
	id := b.key("payment.charge", "retrying", claim.StateFailedRetryable)
	b.age(id, 40*day)
	out, err := b.store.Claim(b.ctx, request("payment.charge", "retrying"))
	if err != nil || out.Kind != claim.Acquired || out.KeyID != id {
		t.Fatalf("retry claim: %+v, %v", out, err)
	}
	// …and whose holder went quiet long ago: past the floor too, waiting for the reclaimer.
	b.age(id, 40*day)
	fresh := b.key("payment.charge", "fresh", claim.StateProcessing)

	rep := b.purge(retention.Options{})

	if !b.exists(id) || !b.exists(fresh) {
		t.Fatalf("a processing key was purged (retrying %v, fresh %v)", b.exists(id), b.exists(fresh))
	}
	if rep.Deleted != 0 || rep.Tombstoned != 0 {
		t.Errorf("deleted %d, tombstoned %d; want nothing", rep.Deleted, rep.Tombstoned)
	}
	if err := b.store.Complete(b.ctx, nil, out.Lease, &claim.Snapshot{Status: 201, ResourceID: "r"}); err != nil {
		t.Errorf("the retry's lease no longer works after the purge: %v", err)
	}
}

func TestPurge_LegalHoldIsNeverPurged(t *testing.T) {
	b := setup(t)
	id := b.key("payment.charge", "held", claim.StateCompleted)
	tomb := b.key("payment.charge", "held-response", claim.StateCompleted)
	b.age(id, 31*day)
	b.age(tomb, 4*day)
	for _, k := range []int64{id, tomb} {
		if changed, err := retention.SetLegalHold(b.ctx, b.db, k, true, "operator:alice", "subpoena 42"); err != nil || !changed {
			t.Fatalf("set hold: %v, %v", changed, err)
		}
	}

	rep := b.purge(retention.Options{})
	if !b.exists(id) || !b.hasResponse(tomb) || rep.Deleted+rep.Tombstoned != 0 {
		t.Fatalf("held keys touched: exists %v, response %v, report %d/%d", b.exists(id), b.hasResponse(tomb), rep.Deleted, rep.Tombstoned)
	}
	evs, err := b.store.History(b.ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Kind != "legal_hold_set" || last.Actor != "operator:alice" || !json.Valid(last.Detail) {
		t.Errorf("hold event: %+v", last)
	}

	if _, err := retention.SetLegalHold(b.ctx, b.db, id, false, "operator:alice", "case closed"); err != nil {
		t.Fatal(err)
	}
	b.purge(retention.Options{})
	if b.exists(id) {
		t.Error("key still there after its hold was lifted")
	}
}

func TestSetLegalHold_NeedsOperatorReasonAndKey(t *testing.T) {
	b := setup(t)
	id := b.key("payment.charge", "k", claim.StateCompleted)
	for _, tc := range []struct {
		actor, reason string
		key           int64
		want          error
	}{
		{"operator:alice", "", id, keys.ErrInvalidHold},
		{"daemon", "why", id, keys.ErrInvalidHold},
		{"operator:alice", "why", id + 1000, claim.ErrNotFound},
	} {
		if _, err := retention.SetLegalHold(b.ctx, b.db, tc.key, true, tc.actor, tc.reason); !errors.Is(err, tc.want) {
			t.Errorf("actor %q reason %q key %d: %v, want %v", tc.actor, tc.reason, tc.key, err, tc.want)
		}
	}
	if b.count(`SELECT count(*) FROM idempotency_keys WHERE legal_hold`) != 0 {
		t.Error("a refused hold was written")
	}
}

func TestPurge_KeysOfOpenFindingsAreNeverPurged(t *testing.T) {
	b := setup(t)
	open := b.key("payment.charge", "open", claim.StateCompleted)
	resolved := b.key("payment.charge", "resolved", claim.StateCompleted)
	openResp := b.key("payment.charge", "open-response", claim.StateCompleted)
	b.age(open, 31*day)
	b.age(resolved, 31*day)
	b.age(openResp, 4*day)
	b.finding(open, "open")
	b.finding(resolved, "resolved")
	b.finding(openResp, "open")

	b.purge(retention.Options{})

	if !b.exists(open) || !b.hasResponse(openResp) {
		t.Errorf("a key with an open finding was purged (exists %v, response %v)", b.exists(open), b.hasResponse(openResp))
	}
	if b.exists(resolved) {
		t.Error("a key whose finding is resolved was kept")
	}
}

func TestPurge_TombstoneAnswersLateRetryAsExpired(t *testing.T) {
	b := setup(t)
	id := b.key("payment.charge", "late", claim.StateCompleted)
	b.age(id, 4*day) // response period (72 h) over, key period (30 d) not

	rep := b.purge(retention.Options{})
	if rep.Tombstoned != 1 || rep.Deleted != 0 {
		t.Fatalf("tombstoned %d, deleted %d; want 1, 0", rep.Tombstoned, rep.Deleted)
	}
	k, err := b.store.Get(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if k.ResponseBody != nil || k.ResponseStatus != nil || k.Fingerprint == "" || k.ResourceID == nil || k.State != claim.StateCompleted {
		t.Fatalf("tombstone: body %q status %v fingerprint %q resource %v state %s", k.ResponseBody, k.ResponseStatus, k.Fingerprint, k.ResourceID, k.State)
	}

	out, err := b.store.Claim(b.ctx, request("payment.charge", "late"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != claim.Expired || out.ResourceID != "r-late" || out.Lease != nil {
		t.Fatalf("late retry: %s resource %q lease %v; want expired, r-late, no lease", out.Kind, out.ResourceID, out.Lease)
	}
	if n := b.count(`SELECT attempts FROM idempotency_keys WHERE id = ?`, id); n != 1 {
		t.Errorf("attempts %d: the late retry executed again", n)
	}
}

func TestPurge_OperationPolicyBeatsWildcard(t *testing.T) {
	b := setup(t)
	for _, p := range []retention.Policy{
		{Operation: "*", State: claim.StateCompleted, KeepResponse: 3 * day, KeepKey: 60 * day},
		{Operation: "payment.refund", State: claim.StateCompleted, KeepResponse: 2 * day, KeepKey: 10 * day},
	} {
		if err := retention.SavePolicy(b.ctx, b.db, p, "operator:alice"); err != nil {
			t.Fatal(err)
		}
	}
	charge31 := b.key("payment.charge", "c31", claim.StateCompleted)
	refund31 := b.key("payment.refund", "r31", claim.StateCompleted)
	charge12 := b.key("payment.charge", "c12", claim.StateCompleted)
	refund12 := b.key("payment.refund", "r12", claim.StateCompleted)
	b.age(charge31, 31*day)
	b.age(refund31, 31*day)
	b.age(charge12, 12*day)
	b.age(refund12, 12*day)

	rep := b.purge(retention.Options{})

	// '*' keeps charges 60 days, longer than the 30 days claim stamped; refunds have their own
	// 10 days, shorter than the stamp (the stamp phase applies it).
	if !b.exists(charge31) || !b.exists(charge12) {
		t.Errorf("charges under the 60-day '*' policy were deleted (31 d: %v, 12 d: %v)", b.exists(charge31), b.exists(charge12))
	}
	if b.exists(refund31) || b.exists(refund12) {
		t.Errorf("refunds past their own 10-day policy were kept (31 d: %v, 12 d: %v)", b.exists(refund31), b.exists(refund12))
	}
	if rep.Restamped == 0 {
		t.Error("the stamp phase re-stamped nothing")
	}
	k, err := b.store.Get(b.ctx, charge12)
	if err != nil {
		t.Fatal(err)
	}
	if want := k.CompletedAt.Add(60 * day); !k.ExpiresAt.Equal(want) {
		t.Errorf("charge expires_at %s, want completed_at + 60 d = %s", k.ExpiresAt, want)
	}
}

func TestDryRun_ChangesNothingAndMatchesTheRun(t *testing.T) {
	b := setup(t)
	if err := retention.SavePolicy(b.ctx, b.db, retention.Policy{Operation: "payment.refund", State: claim.StateFailedFinal,
		KeepResponse: day, KeepKey: 7 * day}, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		op    string
		state claim.State
		age   time.Duration
	}{
		{"payment.charge", claim.StateCompleted, 31 * day},
		{"payment.charge", claim.StateCompleted, 40 * day},
		{"payment.charge", claim.StateCompleted, 4 * day},
		{"payment.charge", claim.StateFailedFinal, 5 * day},
		{"payment.charge", claim.StateFailedRetryable, 35 * day},
		{"payment.refund", claim.StateFailedFinal, 8 * day},
		{"payment.refund", claim.StateFailedFinal, 2 * day},
		{"payment.refund", claim.StateCompleted, time.Hour},
	} {
		b.age(b.key(c.op, "k"+string(rune('a'+i)), c.state), c.age)
	}
	snapshot := func() string {
		var s string
		if err := b.db.Raw(`SELECT md5(string_agg(k::text, '|' ORDER BY id)) FROM idempotency_keys k`).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()

	dry, err := b.job.DryRun(b.ctx, "", "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if snapshot() != before {
		t.Fatal("the dry run changed keys")
	}
	if len(dry.Due) == 0 || dry.Due[0].Day.IsZero() {
		t.Fatalf("dry run has no per-day breakdown: %+v", dry.Due)
	}
	real := b.purge(retention.Options{})

	// The failed_retryable key (a timeout: its outcome unknown) is kept until resolved.
	if dry.Deleted != 3 || dry.Tombstoned != 3 {
		t.Errorf("dry run: %d deleted, %d tombstoned; want 3, 3", dry.Deleted, dry.Tombstoned)
	}
	if !sameCounts(dry.DeletedBy, real.DeletedBy) || !sameCounts(dry.TombstonedBy, real.TombstonedBy) {
		t.Errorf("dry run %v / %v, real run %v / %v", dry.DeletedBy, dry.TombstonedBy, real.DeletedBy, real.TombstonedBy)
	}
	runs, err := retention.PurgeHistory(b.ctx, b.db, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || !runs[1].DryRun || runs[0].DryRun {
		t.Errorf("purge log: want the dry run then the real run, got %+v", runs)
	}
}

func sameCounts(a, b retention.Counts) bool {
	if len(a) != len(b) {
		return false
	}
	for op, states := range a {
		if len(states) != len(b[op]) {
			return false
		}
		for s, n := range states {
			if b[op][s] != n {
				return false
			}
		}
	}
	return true
}

func TestPurge_OperationFilterOnlyTouchesThatOperation(t *testing.T) {
	b := setup(t)
	charge := b.key("payment.charge", "c", claim.StateCompleted)
	refund := b.key("payment.refund", "r", claim.StateCompleted)
	b.age(charge, 31*day)
	b.age(refund, 31*day)

	rep := b.purge(retention.Options{Operation: "payment.refund"})

	if !b.exists(charge) || b.exists(refund) || rep.Deleted != 1 {
		t.Errorf("charge exists %v (want true), refund exists %v (want false), deleted %d", b.exists(charge), b.exists(refund), rep.Deleted)
	}
}

func TestPurge_BatchesWalkTheIndexPastSparedKeys(t *testing.T) {
	b := setup(t, func(c *retention.Config) { c.MinBatchSize = 1 })
	seedExpired(t, b.db, "payment.charge", 25, 2, 40*day)
	held := b.count(`SELECT min(id) FROM idempotency_keys`)
	if _, err := retention.SetLegalHold(b.ctx, b.db, held, true, "operator:alice", "audit"); err != nil {
		t.Fatal(err)
	}

	rep := b.purge(retention.Options{BatchSize: 4})

	if rep.Deleted != 24 || b.count(`SELECT count(*) FROM idempotency_keys`) != 1 || !b.exists(held) {
		t.Errorf("deleted %d, left %d (want 24 deleted, the held key left)", rep.Deleted, b.count(`SELECT count(*) FROM idempotency_keys`))
	}
	if n := b.count(`SELECT count(*) FROM key_events`); n != 2+1 {
		t.Errorf("%d events left, want the held key's 2 plus its hold event", n)
	}
}

func TestPurge_BadOptionsAreRefusedBeforeAnythingRuns(t *testing.T) {
	b := setup(t)
	for _, o := range []retention.Options{{BatchSize: 1}, {BatchSize: retention.MaxBatchSize + 1}, {Operation: "a|b"}} {
		_, err := b.job.Purge(b.ctx, o, nil)
		var ie *errs.FieldError
		if !errors.Is(err, retention.ErrInvalidOptions) || !errors.As(err, &ie) {
			t.Errorf("%+v: %v, want an ErrInvalidOptions input error", o, err)
		}
	}
	if _, err := retention.ParseParams([]byte(`{"dry_rnu": true}`)); !errors.Is(err, retention.ErrInvalidOptions) {
		t.Errorf("unknown param: %v", err)
	}
	if n := b.count(`SELECT count(*) FROM purge_log`); n != 0 {
		t.Errorf("%d purge_log rows for refused runs", n)
	}
}

// A preview of a table larger than ExactUpTo reads a sample of its pages and says so; its counts
// are the sample's scaled up (near the truth, not equal to it). At or below it, or with
// ExactUpTo negative, the counts are exact and not labelled an estimate.
func TestDryRun_BigTableIsEstimatedFromASampleAndSaysSo(t *testing.T) {
	const n = 20_000
	b := setup(t, func(c *retention.Config) { c.ExactUpTo, c.SampleRows = n/2, n/5 })
	seedExpired(t, b.db, "payment.charge", n, 0, 40*day)
	pgtest.Exec(t, b.db, `ANALYZE idempotency_keys`)
	exact, err := retention.NewPurgeJob(b.db, retention.Config{ExactUpTo: -1})
	if err != nil {
		t.Fatal(err)
	}

	est, err := b.job.DryRun(b.ctx, "", "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("estimated %d of %d from %.1f%% of ~%d rows", est.Deleted, n, 100*est.Sample.Fraction, est.Sample.Rows)
	if !est.Sample.Estimated() || est.Sample.Rows < n/2 {
		t.Fatalf("a %d-row table with ExactUpTo %d: sample %+v, want an estimate", n, n/2, est.Sample)
	}
	if est.Deleted < n/2 || est.Deleted > n*3/2 {
		t.Errorf("estimated %d keys to delete, want about %d (scaled up from a sample)", est.Deleted, n)
	}

	got, err := exact.DryRun(b.ctx, "", "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Sample.Estimated() || got.Deleted != n {
		t.Errorf("exact dry run: %d keys (sample %+v), want exactly %d and no estimate", got.Deleted, got.Sample, n)
	}
}
