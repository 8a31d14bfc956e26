package claim_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

var ctx = context.Background()

func TestClaim_FirstAttemptAcquiresAndRecordsEvent(t *testing.T) {
	b := setup(t)
	out, err := b.store.Claim(ctx, req("k1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != claim.Acquired || out.Lease.Attempt != 1 || out.Lease.MustCheckDownstream() {
		t.Fatalf("got %+v", out)
	}
	if len(out.Lease.Token) != 36 {
		t.Fatalf("lease token %q is not a 128-bit uuid", out.Lease.Token)
	}
	if got := b.events(out.KeyID); strings.Join(got, ",") != "claimed" {
		t.Fatalf("events = %v", got)
	}
	k, _ := b.store.Get(ctx, out.KeyID)
	if k.AmountMinor == nil || *k.AmountMinor != 100 || *k.Currency != "CNY" {
		t.Fatalf("amount/currency not extracted: %+v", k)
	}
}

func TestClaim_ConcurrentSameIntentExecutesOnce(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	op.execDelay = 50 * time.Millisecond
	const n = 200
	var wg sync.WaitGroup
	kinds := make([]claim.Kind, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, err := b.store.Run(ctx, op, req("race", payment(500)))
			errs[i] = err
			if out != nil {
				kinds[i] = out.Kind
			}
		}(i)
	}
	wg.Wait()
	completed := 0
	for i := range kinds {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		switch kinds[i] {
		case claim.Completed:
			completed++
		case claim.Replay, claim.InProgress:
		default:
			t.Fatalf("caller %d got %s", i, kinds[i])
		}
	}
	if completed != 1 || op.executes.Load() != 1 {
		t.Fatalf("completed=%d executes=%d, want exactly one", completed, op.executes.Load())
	}
	if c := b.count(`SELECT count(*) FROM idempotency_keys`); c != 1 {
		t.Fatalf("%d rows", c)
	}
}

func TestClaim_SameKeyDifferentIntentIsRejected(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	if out, err := b.store.Run(ctx, op, req("k", payment(100))); err != nil || out.Kind != claim.Completed {
		t.Fatalf("%v %v", out, err)
	}
	out, err := b.store.Run(ctx, op, req("k", payment(200)))
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != claim.Mismatch || out.Snapshot != nil {
		t.Fatalf("want Mismatch without the old result, got %+v", out)
	}
	if op.executes.Load() != 1 {
		t.Fatalf("a mismatched request executed")
	}
	if got := b.events(out.KeyID); got[len(got)-1] != "mismatch_rejected" {
		t.Fatalf("events = %v", got)
	}
}

func TestClaim_MismatchIsRejectedEvenWhileInProgress(t *testing.T) {
	b := setup(t)
	if _, err := b.store.Claim(ctx, req("k", payment(100))); err != nil {
		t.Fatal(err)
	}
	out, err := b.store.Claim(ctx, req("k", payment(101)))
	if err != nil || out.Kind != claim.Mismatch {
		t.Fatalf("%+v %v", out, err)
	}
}

func TestClaim_FieldsWithoutIntentDoNotChangeTheFingerprint(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	first, err := b.store.Run(ctx, op, req("k", payment(100, "description", "first", "client_ts", "2026-01-01T00:00:00Z")))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.store.Run(ctx, op, req("k", []byte(`{"client_ts":"later","currency":" CNY ","payee":"acme",
		"merchant_order_no":"o-1","amount_minor":1e2,"description":"retry"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if again.Kind != claim.Replay || string(again.Snapshot.Body) != string(first.Snapshot.Body) {
		t.Fatalf("retry with only non-intent changes: %+v", again)
	}
}

func TestClaim_ScopeIsTenantOperationAndKey(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	r1 := req("shared", payment(100))
	r2 := r1
	r2.Tenant = "t2"
	o1, _ := b.store.Run(ctx, op, r1)
	o2, _ := b.store.Run(ctx, op, r2)
	if o1.Kind != claim.Completed || o2.Kind != claim.Completed || o1.KeyID == o2.KeyID {
		t.Fatalf("another tenant's key must be its own: %+v %+v", o1, o2)
	}
	if op.executes.Load() != 2 {
		t.Fatalf("executes = %d", op.executes.Load())
	}
}

func TestClaim_BadInputIsRejectedWithATypedErrorAndNoRow(t *testing.T) {
	b := setup(t)
	cases := []struct {
		name   string
		req    claim.Request
		want   error
		reason string
	}{
		{"empty key", req("", payment(1)), claim.ErrInvalidKey, "empty"},
		{"256-char key", req(strings.Repeat("k", 256), payment(1)), claim.ErrInvalidKey, "256"},
		{"non-ASCII key", req("clé", payment(1)), claim.ErrInvalidKey, "printable ASCII"},
		{"control char key", req("a\tb", payment(1)), claim.ErrInvalidKey, "printable ASCII"},
		{"non-JSON intent", req("k", []byte(`amount=1`)), claim.ErrInvalidIntent, "not valid JSON"},
		{"array intent", req("k", []byte(`[1,2]`)), claim.ErrInvalidIntent, "JSON object"},
		{"trailing data", req("k", []byte(`{"a":1} {"b":2}`)), claim.ErrInvalidIntent, "after the JSON"},
		{"fractional amount", req("k", payment(1, "x", "y")[0:0]), claim.ErrInvalidIntent, ""},
		{"tenant with pipe", claim.Request{Tenant: "a|b", Operation: "op", Key: "k", Intent: payment(1)}, claim.ErrInvalidScope, "'|'"},
		{"empty operation", claim.Request{Tenant: "t", Key: "k", Intent: payment(1)}, claim.ErrInvalidScope, "operation"},
	}
	cases[7].req.Intent = []byte(`{"amount_minor": 1.5, "currency": "CNY"}`)
	cases[7].req.Spec = claim.IntentSpec{AmountField: "amount_minor"}
	cases[7].reason = "amount_minor"
	for _, c := range cases {
		_, err := b.store.Claim(ctx, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		var fe *errs.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: error %q does not name the problem (%q)", c.name, err, c.reason)
		}
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
	if err := claim.ValidateKey(strings.Repeat("k", 255)); err != nil {
		t.Fatalf("255 characters must be accepted: %v", err)
	}
}

func TestLease_HolderWhoseLeaseWasTakenOverCannotWrite(t *testing.T) {
	b := setup(t)
	first, err := b.store.Claim(ctx, req("k", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	b.expireLease(first.KeyID)
	second, err := b.store.Claim(ctx, req("k", payment(100)))
	if err != nil || second.Kind != claim.Acquired || !second.Lease.Takeover || second.Lease.Attempt != 2 {
		t.Fatalf("takeover: %+v %v", second, err)
	}
	snap := &claim.Snapshot{Status: 201, Body: []byte(`{}`)}
	if err := b.store.Complete(ctx, nil, first.Lease, snap); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("old holder Complete: %v", err)
	}
	if err := b.store.Fail(ctx, nil, first.Lease, claim.FinalFailure("x", "y", nil)); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("old holder Fail: %v", err)
	}
	if err := b.store.Renew(ctx, first.Lease); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("old holder Renew: %v", err)
	}
	if err := b.store.Release(ctx, first.Lease, "gave up"); !errors.Is(err, claim.ErrLeaseLost) {
		t.Fatalf("old holder Release: %v", err)
	}
	if st := b.state(first.KeyID); st != claim.StateProcessing {
		t.Fatalf("state changed to %s", st)
	}
	if err := b.store.Complete(ctx, nil, second.Lease, snap); err != nil {
		t.Fatalf("new holder: %v", err)
	}
}

func TestLease_LiveLeaseAnswersInProgressWithRetryAfter(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.LeaseTTL = 20 * time.Second })
	if _, err := b.store.Claim(ctx, req("k", payment(100))); err != nil {
		t.Fatal(err)
	}
	out, err := b.store.Claim(ctx, req("k", payment(100)))
	if err != nil || out.Kind != claim.InProgress {
		t.Fatalf("%+v %v", out, err)
	}
	if out.RetryAfter != claim.MaxRetryAfter {
		t.Fatalf("retry after %s, want the cap %s while a holder works", out.RetryAfter, claim.MaxRetryAfter)
	}
}

func TestLease_RenewExtendsTheLease(t *testing.T) {
	b := setup(t)
	out, _ := b.store.Claim(ctx, req("k", payment(100)))
	b.expireLease(out.KeyID)
	if err := b.store.Renew(ctx, out.Lease); err != nil {
		t.Fatal(err)
	}
	again, _ := b.store.Claim(ctx, req("k", payment(100)))
	if again.Kind != claim.InProgress {
		t.Fatalf("renewed lease was taken over: %s", again.Kind)
	}
}

func TestComplete_CommitsWithTheCallersTransaction(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `CREATE TABLE orders (id text PRIMARY KEY)`)
	out, _ := b.store.Claim(ctx, req("k", payment(100)))
	snap := &claim.Snapshot{Status: 201, Body: []byte(`{"id":"p1"}`), ResourceID: "p1"}
	rollback := errors.New("business write failed")
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO orders VALUES ('p1')`).Error; err != nil {
			return err
		}
		if err := b.store.Complete(ctx, tx, out.Lease, snap); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if st := b.state(out.KeyID); st != claim.StateProcessing || b.count(`SELECT count(*) FROM orders`) != 0 {
		t.Fatalf("rolled-back transaction left state %s", st)
	}
	err = b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO orders VALUES ('p1')`).Error; err != nil {
			return err
		}
		return b.store.Complete(ctx, tx, out.Lease, snap)
	})
	if err != nil || b.state(out.KeyID) != claim.StateCompleted || b.count(`SELECT count(*) FROM orders`) != 1 {
		t.Fatalf("commit: %v", err)
	}
}

func TestReplay_ReturnsTheSnapshotAsStoredWithAllowListedHeaders(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	first, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	// The resource changes later; the replay still answers the creation-time response.
	pgtest.Exec(t, b.db, `UPDATE key_events SET detail = '{}'`)
	again, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || again.Kind != claim.Replay {
		t.Fatalf("%+v %v", again, err)
	}
	if again.Snapshot.Status != 201 || string(again.Snapshot.Body) != string(first.Snapshot.Body) {
		t.Fatalf("replay %+v != first %+v", again.Snapshot, first.Snapshot)
	}
	if _, ok := again.Snapshot.Headers["Set-Cookie"]; ok {
		t.Fatal("Set-Cookie was stored")
	}
	if again.Snapshot.Headers["Location"] == "" || again.Snapshot.Headers["Content-Type"] != "application/json" {
		t.Fatalf("allow-listed headers lost: %v", again.Snapshot.Headers)
	}
	if op.executes.Load() != 1 || op.applies.Load() != 1 {
		t.Fatal("a replay executed or applied again")
	}
}

func TestReplay_FailedFinalIsReplayedAndFailedRetryableIsClaimedAgain(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	op.execErr = claim.FinalFailure("card_declined", "declined", &claim.Snapshot{Status: 402, Body: []byte(`{"error":"declined"}`)})
	out, _ := b.store.Run(ctx, op, req("final", payment(100)))
	if out.Kind != claim.Failed || out.State != claim.StateFailedFinal {
		t.Fatalf("%+v", out)
	}
	again, _ := b.store.Run(ctx, op, req("final", payment(100)))
	if again.Kind != claim.Replay || again.Failure == nil || again.Snapshot.Status != 402 || op.executes.Load() != 1 {
		t.Fatalf("failed_final must be replayed: %+v", again)
	}

	op2 := newFakeOp()
	op2.execErr = claim.RetryableFailure("upstream_503", "try later")
	out, _ = b.store.Run(ctx, op2, req("retry", payment(100)))
	if out.State != claim.StateFailedRetryable {
		t.Fatalf("%+v", out)
	}
	op2.execErr = nil
	c, err := b.store.Claim(ctx, claim.Request{Tenant: "t1", Operation: "payment.charge", Key: "retry", Intent: payment(100), Spec: op2.Intent()})
	if err != nil || c.Kind != claim.Acquired || !c.Lease.Retry || c.Lease.Attempt != 2 {
		t.Fatalf("failed_retryable must be claimed again with attempt+1: %+v %v", c, err)
	}
}

func TestRelease_FailureBeforeAnyVisibleChangeLeavesNoRecord(t *testing.T) {
	b := setup(t)
	out, _ := b.store.Claim(ctx, req("k", payment(100)))
	if err := b.store.Release(ctx, out.Lease, "validation failed"); err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`) + b.count(`SELECT count(*) FROM key_events`); n != 0 {
		t.Fatalf("released first claim left %d rows (keys and events)", n)
	}
	again, _ := b.store.Claim(ctx, req("k", payment(100)))
	if again.Kind != claim.Acquired || again.Lease.Attempt != 1 {
		t.Fatalf("%+v", again)
	}
}

func TestTakeover_FoundDownstreamCompletesWithoutExecuting(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	op.crashAfterExecute = true
	first, _ := b.store.Run(ctx, op, req("k", payment(100)))
	if first.State != claim.StateFailedRetryable {
		t.Fatalf("ambiguous execute error must be retryable: %+v", first)
	}
	op.crashAfterExecute = false
	again, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || again.Kind != claim.Recovered || op.executes.Load() != 1 {
		t.Fatalf("retry must find the charge downstream: %+v %v executes=%d", again, err, op.executes.Load())
	}
	ev := strings.Join(b.events(again.KeyID), ",")
	if ev != "claimed,failed,taken_over,recovered_from_downstream" {
		t.Fatalf("events = %s", ev)
	}
}

func TestTakeover_ExecutesOnlyAfterTwoNotFoundsAQuarantineApart(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.Quarantine = time.Hour })
	op := newFakeOp()
	first, _ := b.store.Claim(ctx, req("k", payment(100)))
	b.expireLease(first.KeyID) // the first attempt crashed before reaching downstream

	out, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || out.Kind != claim.InProgress || op.executes.Load() != 0 {
		t.Fatalf("first not-found must not execute: %+v %v", out, err)
	}
	if out.RetryAfter < 59*time.Minute {
		t.Fatalf("retry after %s, want the quarantine", out.RetryAfter)
	}
	out, _ = b.store.Run(ctx, op, req("k", payment(100)))
	if out.Kind != claim.InProgress || op.executes.Load() != 0 {
		t.Fatalf("a retry inside the quarantine must wait: %+v", out)
	}
	b.ageNotFound(first.KeyID, time.Hour+time.Second)
	out, err = b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || out.Kind != claim.Completed || op.executes.Load() != 1 {
		t.Fatalf("second not-found after the quarantine must execute once: %+v %v", out, err)
	}
	ev := strings.Join(b.events(first.KeyID), ",")
	if ev != "claimed,taken_over,downstream_not_found,taken_over,executing,completed" {
		t.Fatalf("events = %s", ev)
	}
}

func TestTakeover_DaemonDoesNotExecuteUnlessTheOperationOptsIn(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.Quarantine = time.Hour })
	op := newFakeOp()
	first, _ := b.store.Claim(ctx, req("k", payment(100)))
	b.expireLease(first.KeyID)
	drive := func() *claim.Outcome {
		leases, err := b.store.TakeoverExpired(ctx, 10, "daemon")
		if err != nil || len(leases) != 1 {
			t.Fatalf("takeover batch: %v %d", err, len(leases))
		}
		out, err := b.store.Drive(ctx, op, leases[0], claim.DriveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := drive(); out.Kind != claim.InProgress {
		t.Fatalf("%+v", out)
	}
	b.ageNotFound(first.KeyID, time.Hour+time.Second)
	if out := drive(); out.State != claim.StateFailedRetryable || op.executes.Load() != 0 {
		t.Fatalf("daemon after proof: %+v executes=%d", out, op.executes.Load())
	}
}

func TestTakeover_LookupErrorsParkTheKeyAndFlagItAfterNTries(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.LookupAttempts = 3; c.LookupBackoff = time.Second })
	op := newFakeOp()
	op.lookupErr = errors.New("channel unreachable")
	first, _ := b.store.Claim(ctx, req("k", payment(100)))
	for i := 1; i <= 3; i++ {
		b.expireLease(first.KeyID)
		out, err := b.store.Run(ctx, op, req("k", payment(100)))
		if err != nil || out.Kind != claim.InProgress {
			t.Fatalf("try %d: %+v %v", i, out, err)
		}
		k, _ := b.store.Get(ctx, first.KeyID)
		if k.State != claim.StateProcessing || k.LookupFailures != i || k.NeedsAttention != (i >= 3) {
			t.Fatalf("try %d: state=%s failures=%d attention=%v", i, k.State, k.LookupFailures, k.NeedsAttention)
		}
	}
	if op.executes.Load() != 0 {
		t.Fatal("executed while downstream could not answer")
	}
}

func TestTombstone_ExpiredResponseAnswersExpiredNotExecution(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	first, _ := b.store.Run(ctx, op, req("k", payment(100)))
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET response_day = NULL,
		response_expires_at = now() - interval '1 second' WHERE id = ?`, first.KeyID)
	out, err := b.store.Run(ctx, op, req("k", payment(100)))
	if err != nil || out.Kind != claim.Expired || out.ResourceID == "" || op.executes.Load() != 1 {
		t.Fatalf("%+v %v", out, err)
	}
}

func TestDigestAndDownstreamKey(t *testing.T) {
	t.Parallel()
	d1 := claim.Digest([]byte("secret-one-0123456"), "t", "op", "k")
	d2 := claim.Digest([]byte("secret-two-0123456"), "t", "op", "k")
	if d1 == d2 || len(d1) != 64 {
		t.Fatalf("digest must depend on the secret: %s %s", d1, d2)
	}
	if d1 == claim.Digest([]byte("secret-one-0123456"), "t", "op", "k2") || d1 == claim.Digest([]byte("secret-one-0123456"), "t2", "op", "k") {
		t.Fatal("digest must depend on the key and the tenant")
	}
	if _, err := hex.DecodeString(d1); err != nil {
		t.Fatalf("digest is not hex: %s", d1)
	}
	k1 := claim.DownstreamKey("t", "op", "k")
	if k1 != claim.DownstreamKey("t", "op", "k") || len(k1) != 32 {
		t.Fatalf("downstream key must be deterministic and 32 chars: %s", k1)
	}
	if k1 == claim.DownstreamKey("t2", "op", "k") || k1 == claim.DownstreamKey("t", "op", "k2") {
		t.Fatal("downstream key must differ per scope")
	}
}

func TestEvents_EveryTransitionIsRecordedInItsTransaction(t *testing.T) {
	b := setup(t)
	out, _ := b.store.Claim(ctx, req("k", payment(100)))
	_ = b.db.Transaction(func(tx *gorm.DB) error {
		_ = b.store.Complete(ctx, tx, out.Lease, &claim.Snapshot{Status: 201})
		return errors.New("rollback")
	})
	if ev := strings.Join(b.events(out.KeyID), ","); ev != "claimed" {
		t.Fatalf("a rolled-back completion left events %s", ev)
	}
	if err := b.store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if ev := strings.Join(b.events(out.KeyID), ","); ev != "claimed,completed" {
		t.Fatalf("events = %s", ev)
	}
}

func TestRun_RenewsTheLeaseWhileExecuting(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.LeaseTTL = time.Second })
	op := newFakeOp()
	op.execDelay = 2500 * time.Millisecond
	done := make(chan *claim.Outcome)
	go func() {
		out, _ := b.store.Run(ctx, op, req("k", payment(100)))
		done <- out
	}()
	pgtest.Await(t, b.db, 5*time.Second, "the key claimed", func() bool { return b.count(`SELECT count(*) FROM idempotency_keys`) == 1 },
		"idempotency_keys")
	// Past the first lease's expiry: only the renewals keep the key.
	pgtest.SleepUntil(t, b.db, `SELECT created_at + interval '1.8 s' FROM idempotency_keys WHERE key = 'k'`)
	out, err := b.store.Claim(ctx, claim.Request{Tenant: "t1", Operation: "payment.charge", Key: "k", Intent: payment(100), Spec: op.Intent()})
	if err != nil || out.Kind != claim.InProgress {
		t.Fatalf("a renewed lease was taken over: %+v %v", out, err)
	}
	if res := <-done; res.Kind != claim.Completed {
		t.Fatalf("%+v", res)
	}
}

func TestOutbox_EnqueueCommitsWithTheBusinessTransaction(t *testing.T) {
	b := setup(t)
	msg := claim.OutboxMessage{Operation: "receipt.notify", DownstreamKey: "dk1", Payload: []byte(`{"to":"x"}`)}
	_ = b.db.Transaction(func(tx *gorm.DB) error {
		_ = claim.Enqueue(ctx, tx, msg)
		return errors.New("rollback")
	})
	if n := b.count(`SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("rolled back enqueue left %d rows", n)
	}
	for i := 0; i < 2; i++ {
		if err := b.db.Transaction(func(tx *gorm.DB) error { return claim.Enqueue(ctx, tx, msg) }); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(`SELECT count(*) FROM outbox WHERE state = 'pending'`); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}
}

func TestConsumer_DedupesByBusinessKeyNotMessageID(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `CREATE TABLE shipments (order_id text)`)
	consume := func(msgID string) bool {
		var first bool
		err := b.db.Transaction(func(tx *gorm.DB) error {
			var err error
			if first, err = claim.ConsumeOnce(ctx, tx, "shipping", "order-42", msgID); err != nil || !first {
				return err
			}
			return tx.Exec(`INSERT INTO shipments VALUES ('order-42')`).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		return first
	}
	if !consume("m1") || consume("m1") || consume("m2-redelivered-under-a-new-id") {
		t.Fatal("dedupe by business key failed")
	}
	if n := b.count(`SELECT count(*) FROM shipments`); n != 1 {
		t.Fatalf("%d shipments", n)
	}
}

// An operator's replay holds the key through the quarantine: the first not-found is recorded
// without giving the lease up, the reclaimer finds nothing to take over meanwhile, and the holder
// itself looks again and executes — one outcome, one execution.
func TestDrive_HoldThroughQuarantineKeepsTheKeyFromTheReclaimer(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.LeaseTTL = time.Second; c.Quarantine = 2500 * time.Millisecond })
	op := newFakeOp()
	op.execErr = claim.RetryableFailure("upstream_503", "try later")
	if out, _ := b.store.Run(ctx, op, req("held", payment(100))); out.State != claim.StateFailedRetryable {
		t.Fatalf("seed: %+v", out)
	}
	op.execErr = nil
	c, err := b.store.Takeover(ctx, b.count(`SELECT id FROM idempotency_keys`), "operator:olga")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *claim.Outcome, 1)
	go func() {
		out, err := b.store.Drive(ctx, op, c, claim.DriveOptions{Execute: true, HoldThroughQuarantine: true})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	var out *claim.Outcome
	for polls := 0; out == nil && polls < 100; polls++ {
		taken, err := b.store.TakeoverExpired(ctx, 10, "daemon")
		if err != nil {
			t.Fatal(err)
		}
		if len(taken) > 0 {
			t.Fatalf("the reclaimer took the key over while the replay held it (poll %d)", polls)
		}
		select {
		case out = <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	if out == nil || out.Kind != claim.Completed {
		t.Fatalf("outcome %+v, want completed", out)
	}
	if op.lookups.Load() != 2 || op.executes.Load() != 2 {
		t.Errorf("lookups %d executes %d; want 2 looks a quarantine apart, then the one execution after the seed's", op.lookups.Load(), op.executes.Load())
	}
	if got := fmt.Sprint(b.events(out.KeyID)); !strings.Contains(got, "downstream_not_found executing completed") {
		t.Errorf("history %s: want downstream_not_found, executing, completed", got)
	}
}

// TestQuarantineOver_OnlyAQuarantineAfterTheFirstNotFound: absence is proven by a second
// not-found only once a whole quarantine has passed since the first; with no first not-found
// recorded it is never over. Drive and an operator's replay preview both ask this.
func TestQuarantineOver_OnlyAQuarantineAfterTheFirstNotFound(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.Quarantine = time.Minute })
	at := func(ago time.Duration) *time.Time { t := time.Now().Add(-ago); return &t }
	for name, tc := range map[string]struct {
		notFoundAt *time.Time
		want       bool
	}{
		"no not-found yet":               {nil, false},
		"just now":                       {at(0), false},
		"a second short of a quarantine": {at(59 * time.Second), false},
		"a quarantine ago":               {at(time.Minute), true},
		"an hour ago":                    {at(time.Hour), true},
	} {
		if got := b.store.QuarantineOver(tc.notFoundAt); got != tc.want {
			t.Errorf("%s: QuarantineOver = %v, want %v", name, got, tc.want)
		}
	}
	first := time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)
	if got := b.store.QuarantineEnds(first); !got.Equal(first.Add(time.Minute)) {
		t.Errorf("QuarantineEnds = %s", got)
	}
}
