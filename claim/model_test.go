package claim_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"pgregory.net/rapid"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// The claim API against a model: random sequences of claims, completions, failures (final,
// retryable, held), releases, renewals, takeovers (by a client retry, an operator and the daemon's
// batch), operator releases and final marks, legal holds, retention passes and concurrent holders,
// run on the real PostgreSQL, with the store compared to an in-memory model of the keys after
// every step. The model is the contract of package claim's doc written as code: who may write,
// what each claim answers, what a purge may take.

// modelChecks and modelSteps bound the run inside `make test` (seconds): -rapid.checks and
// -rapid.steps (or RAPID_CHECKS, RAPID_STEPS) given explicitly win.
const (
	modelChecks = 100
	modelSteps  = 50
)

// modelSlots are the client keys a run plays with: few, so that sequences meet on one key.
var modelSlots = []string{"key-a", "key-b", "key-c"}

// modelIntents are the two intents a key may be sent with: the second reuses a key with another
// amount.
var modelIntents = []json.RawMessage{payment(100), payment(250)}

// mKey is the model of one key row.
type mKey struct {
	id           int64
	intent       int
	state        claim.State
	attempts     int
	token        string // the live holder's token ("" when nobody holds it)
	leaseExpired bool   // processing: the holder's lease has lapsed
	held         bool
	attention    bool // needs_attention: set by a held failure, cleared by an ending or an operator
	retryCleared bool
	legalHold    bool
	errorCode    string
	answer       *mAnswer // the stored answer, nil when none
	// respDue and keyDue: the key's response and row periods are over (aged by the test).
	respDue, keyDue bool
}

// mAnswer is a stored answer, told apart by its body.
type mAnswer struct {
	status int
	body   string
}

// mLease is a lease the run obtained, live or long stale.
type mLease struct {
	slot  int
	lease *claim.Lease
}

type claimModel struct {
	t      *testing.T
	db     *gorm.DB
	store  *claim.Store
	tenant string
	keys   map[int]*mKey // by slot; absent: no row
	leases []mLease
	serial int
	steps  *atomic.Int64
	fps    []string // fingerprint of each intent
}

func TestClaimModel_StoreFollowsTheContract(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && !flagSet("rapid.checks") && !envSet("RAPID_CHECKS") {
		_ = f.Value.Set(fmt.Sprint(modelChecks))
	}
	if f := flag.Lookup("rapid.steps"); f != nil && !flagSet("rapid.steps") && !envSet("RAPID_STEPS") {
		_ = f.Value.Set(fmt.Sprint(modelSteps))
	}
	b := setup(t, func(c *claim.Config) { c.LeaseTTL = time.Minute })
	var fps []string
	for _, in := range modelIntents {
		i, err := claim.Canonicalize(in, (&fakeOp{}).Intent())
		if err != nil {
			t.Fatal(err)
		}
		fps = append(fps, i.Fingerprint)
	}
	var steps, runs atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		// One database for the whole property: each run starts from empty tables (the daemon's
		// batch takeover scans every key, not one tenant's).
		pgtest.Exec(t, b.db, `DELETE FROM idempotency_keys; DELETE FROM key_events; DELETE FROM key_responses; DELETE FROM key_answers`)
		m := &claimModel{t: t, db: b.db, store: b.store, tenant: fmt.Sprintf("t%d", runs.Add(1)),
			keys: map[int]*mKey{}, steps: &steps, fps: fps}
		rt.Repeat(rapid.StateMachineActions(m))
	})
	t.Logf("claim model: %d runs, %d steps, each followed by a comparison of every key", runs.Load(), steps.Load())
}

func flagSet(name string) (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func envSet(name string) bool { _, ok := os.LookupEnv(name); return ok }

func (m *claimModel) req(slot, intent int) claim.Request {
	r := req(modelSlots[slot], modelIntents[intent])
	r.Tenant = m.tenant
	return r
}

func (m *claimModel) slot(t *rapid.T) int {
	return rapid.IntRange(0, len(modelSlots)-1).Draw(t, "slot")
}

func (m *claimModel) addLease(slot int, l *claim.Lease) { m.leases = append(m.leases, mLease{slot, l}) }

// pickLease draws any lease obtained so far, live or stale; none: the step is skipped.
func (m *claimModel) pickLease(t *rapid.T) mLease {
	if len(m.leases) == 0 {
		t.Skip("no lease yet")
	}
	return m.leases[rapid.IntRange(0, len(m.leases)-1).Draw(t, "lease")]
}

// current says whether l is the lease the key's row carries now.
func (m *claimModel) current(l mLease) (*mKey, bool) {
	k := m.keys[l.slot]
	return k, k != nil && k.id == l.lease.KeyID && k.token != "" && k.token == l.lease.Token
}

// expectClaim is the model's answer to a claim of slot with intent, and the key as it will be.
type expectClaim struct {
	kind             claim.Kind
	takeover, retry  bool
	attempt          int
	answer           *mAnswer
	failureCode      string
	hold             bool
	replayFailureSet bool
}

func (m *claimModel) predictClaim(slot, intent int) expectClaim {
	k := m.keys[slot]
	switch {
	case k == nil:
		return expectClaim{kind: claim.Acquired, attempt: 1}
	case k.intent != intent:
		return expectClaim{kind: claim.Mismatch}
	}
	switch k.state {
	case claim.StateCompleted, claim.StateFailedFinal:
		if k.respDue || (k.state == claim.StateCompleted && k.answer == nil) {
			return expectClaim{kind: claim.Expired}
		}
		return expectClaim{kind: claim.Replay, answer: k.answer, failureCode: k.errorCode,
			replayFailureSet: k.state == claim.StateFailedFinal}
	case claim.StateFailedRetryable:
		if k.held && k.answer != nil {
			return expectClaim{kind: claim.Replay, answer: k.answer, failureCode: k.errorCode, hold: true, replayFailureSet: true}
		}
		return expectClaim{kind: claim.Acquired, attempt: k.attempts + 1, retry: !k.retryCleared}
	default: // processing
		if !k.leaseExpired {
			return expectClaim{kind: claim.InProgress}
		}
		return expectClaim{kind: claim.Acquired, attempt: k.attempts + 1, takeover: true}
	}
}

// applyClaim checks out against e and moves the model.
func (m *claimModel) applyClaim(t *rapid.T, slot, intent int, e expectClaim, out *claim.Outcome) {
	if out.Kind != e.kind {
		t.Fatalf("claim %s (intent %d): got %s, model says %s", modelSlots[slot], intent, out.Kind, e.kind)
	}
	switch e.kind {
	case claim.Acquired:
		l := out.Lease
		if l.Attempt != e.attempt || l.Takeover != e.takeover || l.Retry != e.retry {
			t.Fatalf("claim %s: lease attempt %d takeover %v retry %v, model says %d %v %v",
				modelSlots[slot], l.Attempt, l.Takeover, l.Retry, e.attempt, e.takeover, e.retry)
		}
		k := m.keys[slot]
		if k == nil {
			k = &mKey{intent: intent}
			m.keys[slot] = k
		}
		k.id, k.state, k.attempts, k.token, k.leaseExpired = out.KeyID, claim.StateProcessing, l.Attempt, l.Token, false
		m.addLease(slot, l)
	case claim.Replay:
		if got := answerOf(out.Snapshot); !sameAnswer(got, e.answer) {
			t.Fatalf("replay %s: answer %v, model says %v", modelSlots[slot], got, e.answer)
		}
		if e.replayFailureSet != (out.Failure != nil) {
			t.Fatalf("replay %s: failure %+v, model says one: %v", modelSlots[slot], out.Failure, e.replayFailureSet)
		}
		if out.Failure != nil && (out.Failure.Code != e.failureCode || out.Failure.Hold != e.hold) {
			t.Fatalf("replay %s: failure %s hold %v, model says %s hold %v", modelSlots[slot], out.Failure.Code, out.Failure.Hold,
				e.failureCode, e.hold)
		}
	}
}

// Claim is a client's attempt under a key, with the key's first intent or another.
func (m *claimModel) Claim(t *rapid.T) {
	slot := m.slot(t)
	intent := rapid.IntRange(0, len(modelIntents)-1).Draw(t, "intent")
	e := m.predictClaim(slot, intent)
	out, err := m.store.Claim(ctx, m.req(slot, intent))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	m.applyClaim(t, slot, intent, e, out)
}

// ConcurrentClaims are several attempts under one key at once: at most one acquires; the others
// answer as a claim after the winner's would.
func (m *claimModel) ConcurrentClaims(t *rapid.T) {
	slot := m.slot(t)
	n := rapid.IntRange(2, 5).Draw(t, "holders")
	intent := m.keys[slot]
	in := 0
	if intent != nil {
		in = intent.intent
	}
	e := m.predictClaim(slot, in)
	outs := make([]*claim.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i], errs[i] = m.store.Claim(ctx, m.req(slot, in)) }()
	}
	wg.Wait()
	var winner *claim.Outcome
	for i, out := range outs {
		if errs[i] != nil {
			t.Fatalf("concurrent claim %d: %v", i, errs[i])
		}
		if out.Kind == claim.Acquired {
			if winner != nil {
				t.Fatalf("concurrent claims of %s: two acquired (attempts %d and %d)", modelSlots[slot], winner.Lease.Attempt, out.Lease.Attempt)
			}
			winner = out
		}
	}
	if e.kind == claim.Acquired {
		if winner == nil {
			t.Fatalf("concurrent claims of %s: none acquired, model says one", modelSlots[slot])
		}
		m.applyClaim(t, slot, in, e, winner)
		e = expectClaim{kind: claim.InProgress} // what every loser saw: the winner's live lease
	}
	for _, out := range outs {
		if out != winner {
			m.applyClaim(t, slot, in, e, out)
		}
	}
}

// completeAnswer is a fresh answer, told apart from every other one by its body.
func (m *claimModel) completeAnswer() *claim.Snapshot {
	m.serial++
	id := fmt.Sprintf("pay_%d", m.serial)
	return &claim.Snapshot{Status: 201, Body: []byte(fmt.Sprintf(`{"payment_id":%q}`, id)), ResourceID: id,
		Headers: map[string]string{"Content-Type": "application/json"}}
}

// Complete is a holder (or a stale one) completing its key.
func (m *claimModel) Complete(t *rapid.T) {
	l := m.pickLease(t)
	snap := m.completeAnswer()
	err := m.store.Complete(ctx, nil, l.lease, snap)
	k, ok := m.current(l)
	m.expectWrite(t, "complete", ok, err)
	if ok {
		k.state, k.token, k.held, k.retryCleared, k.errorCode, k.attention = claim.StateCompleted, "", false, false, "", false
		k.respDue, k.keyDue = false, false // an ending stamps fresh retention deadlines
		k.answer = &mAnswer{snap.Status, string(snap.Body)}
	}
}

// ConcurrentCompletes are every lease ever given out on one key completing at once: only the
// live holder's write lands.
func (m *claimModel) ConcurrentCompletes(t *rapid.T) {
	slot := m.slot(t)
	var ls []mLease
	for _, l := range m.leases {
		if l.slot == slot {
			ls = append(ls, l)
		}
	}
	if len(ls) < 2 {
		t.Skip("fewer than two leases on this key")
	}
	snaps := make([]*claim.Snapshot, len(ls))
	errs := make([]error, len(ls))
	for i := range ls {
		snaps[i] = m.completeAnswer()
	}
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.store.Complete(ctx, nil, l.lease, snaps[i]) }()
	}
	wg.Wait()
	for i, l := range ls {
		k, ok := m.current(l)
		m.expectWrite(t, "concurrent complete", ok, errs[i])
		if ok {
			defer func() { // after the others are judged against the holder as it was
				k.state, k.token, k.held, k.retryCleared, k.errorCode, k.attention = claim.StateCompleted, "", false, false, "", false
				k.respDue, k.keyDue = false, false // an ending stamps fresh retention deadlines
				k.answer = &mAnswer{snaps[i].Status, string(snaps[i].Body)}
			}()
		}
	}
}

// Fail is a holder recording a failed attempt: final (with or without an answer), retryable, or
// held (outcome unknown, its answer replayed until an operator decides).
func (m *claimModel) Fail(t *rapid.T) {
	l := m.pickLease(t)
	how := rapid.SampledFrom([]string{"final", "final-answer", "retryable", "held"}).Draw(t, "failure")
	m.serial++
	ans := &claim.Snapshot{Status: 402, Body: []byte(fmt.Sprintf(`{"error":"declined","n":%d}`, m.serial))}
	var f *claim.Failure
	switch how {
	case "final":
		f = claim.FinalFailure("declined", "card declined", nil)
	case "final-answer":
		f = claim.FinalFailure("declined", "card declined", ans)
	case "retryable":
		f = claim.RetryableFailure("timeout", "downstream timed out")
	case "held":
		ans.Status = 502
		f = claim.HeldFailure("unknown", "downstream answered 502", ans)
	}
	err := m.store.Fail(ctx, nil, l.lease, f)
	k, ok := m.current(l)
	m.expectWrite(t, "fail "+how, ok, err)
	if !ok {
		return
	}
	k.token, k.retryCleared, k.errorCode, k.held = "", false, f.Code, how == "held"
	k.attention = k.attention || k.held
	k.respDue, k.keyDue = false, false
	k.state = claim.StateFailedFinal
	if f.Retryable {
		k.state = claim.StateFailedRetryable
	}
	k.answer = nil
	if f.Snapshot != nil {
		k.answer = &mAnswer{f.Snapshot.Status, string(f.Snapshot.Body)}
	}
}

// Release gives a key up after a failure before anything visible: a first claim leaves no row; a
// later attempt leaves the key failed_retryable.
func (m *claimModel) Release(t *rapid.T) {
	l := m.pickLease(t)
	err := m.store.Release(ctx, l.lease, "nothing sent")
	k, ok := m.current(l)
	m.expectWrite(t, "release", ok, err)
	if !ok {
		return
	}
	if l.lease.Attempt == 1 && !l.lease.MustCheckDownstream() {
		delete(m.keys, l.slot)
		return
	}
	k.state, k.token, k.errorCode, k.retryCleared = claim.StateFailedRetryable, "", "released", false
}

// Renew extends a holder's lease; a stale holder learns it lost the key.
func (m *claimModel) Renew(t *rapid.T) {
	l := m.pickLease(t)
	err := m.store.Renew(ctx, l.lease)
	k, ok := m.current(l)
	m.expectWrite(t, "renew", ok, err)
	if ok {
		k.leaseExpired = false
	}
}

// LeaseLapses is a holder that stopped renewing (crashed, partitioned) long enough ago.
func (m *claimModel) LeaseLapses(t *rapid.T) {
	slot := m.slot(t)
	k := m.keys[slot]
	if k == nil || k.state != claim.StateProcessing {
		t.Skip("no processing key")
	}
	pgtest.Exec(m.t, m.db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id = ?`, k.id)
	k.leaseExpired = true
}

// OperatorTakeover is an operator (or a reconciliation fix) taking one key over by id.
func (m *claimModel) OperatorTakeover(t *rapid.T) {
	slot := m.slot(t)
	k := m.keys[slot]
	if k == nil {
		t.Skip("no key")
	}
	l, err := m.store.Takeover(ctx, k.id, "operator:model")
	if !replayable(k) {
		if !errors.Is(err, claim.ErrNotReplayable) {
			t.Fatalf("operator takeover of %s %s: got %v, model says ErrNotReplayable", modelSlots[slot], k.state, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("operator takeover of %s %s: %v", modelSlots[slot], k.state, err)
	}
	wantTakeover, wantRetry := k.state == claim.StateProcessing, k.state == claim.StateFailedRetryable && !k.retryCleared
	if l.Attempt != k.attempts+1 || l.Takeover != wantTakeover || l.Retry != wantRetry {
		t.Fatalf("operator takeover of %s: attempt %d takeover %v retry %v, model says %d %v %v",
			modelSlots[slot], l.Attempt, l.Takeover, l.Retry, k.attempts+1, wantTakeover, wantRetry)
	}
	k.state, k.attempts, k.token, k.leaseExpired = claim.StateProcessing, l.Attempt, l.Token, false
	m.addLease(slot, l)
}

// DaemonTakeover is the reclaimer's batch: every processing key whose lease lapsed.
func (m *claimModel) DaemonTakeover(t *rapid.T) {
	ls, err := m.store.TakeoverExpired(ctx, 10, "daemon")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int{}
	for slot, k := range m.keys {
		if k.state == claim.StateProcessing && k.leaseExpired {
			want[k.id] = slot
		}
	}
	if len(ls) != len(want) {
		t.Fatalf("daemon takeover: %d leases, model says %d", len(ls), len(want))
	}
	for _, l := range ls {
		slot, ok := want[l.KeyID]
		if !ok {
			t.Fatalf("daemon takeover took key %d, which the model holds live", l.KeyID)
		}
		k := m.keys[slot]
		if !l.Takeover || l.Attempt != k.attempts+1 {
			t.Fatalf("daemon takeover of %s: attempt %d takeover %v, model says %d true", modelSlots[slot], l.Attempt, l.Takeover, k.attempts+1)
		}
		k.attempts, k.token, k.leaseExpired = l.Attempt, l.Token, false
		m.addLease(slot, l)
	}
}

// unresolved: the key failed retryably, its attempt may have acted outside and nobody has found
// out yet — held, flagged, or neither proven absent nor released by an operator. Retention never
// touches it (issue 37 item 4): a late retry of a purged one would execute blind. A final state
// is a known outcome whatever flag it still carries (a held key an operator took over and that
// then failed final keeps needs_attention, and is purged like any failed_final key).
func unresolved(k *mKey) bool {
	return k.state == claim.StateFailedRetryable &&
		(k.held || k.attention || (!k.retryCleared && k.errorCode != "downstream_not_found"))
}

func replayable(k *mKey) bool {
	return k.state == claim.StateFailedRetryable || (k.state == claim.StateProcessing && k.leaseExpired)
}

// OperatorReleaseOrFinal is an administrator releasing a stuck or held key for retry, or marking
// it final, at the version read just before.
func (m *claimModel) OperatorReleaseOrFinal(t *rapid.T) {
	slot := m.slot(t)
	k := m.keys[slot]
	if k == nil {
		t.Skip("no key")
	}
	final := rapid.Bool().Draw(t, "final")
	row, err := m.store.Get(ctx, k.id)
	if err != nil {
		t.Fatal(err)
	}
	if final {
		err = keys.MarkFinal(ctx, m.store, nil, k.id, row.Version, "operator:model", "checked at the channel")
	} else {
		err = keys.ReleaseForRetry(ctx, m.store, nil, k.id, row.Version, "operator:model", "nothing at the channel")
	}
	if !replayable(k) {
		if !errors.Is(err, claim.ErrNotReplayable) {
			t.Fatalf("operator on %s %s (final %v): got %v, model says ErrNotReplayable", modelSlots[slot], k.state, final, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("operator on %s %s (final %v): %v", modelSlots[slot], k.state, final, err)
	}
	k.token, k.held, k.attention = "", false, false
	if final {
		k.state, k.errorCode = claim.StateFailedFinal, "marked_final"
		k.respDue, k.keyDue = false, false
		return
	}
	k.state, k.errorCode, k.retryCleared, k.answer = claim.StateFailedRetryable, "operator_released", true, nil
}

// LegalHold puts a key on legal hold or lifts it.
func (m *claimModel) LegalHold(t *rapid.T) {
	slot := m.slot(t)
	k := m.keys[slot]
	if k == nil {
		t.Skip("no key")
	}
	on := rapid.Bool().Draw(t, "hold")
	changed, err := keys.SetLegalHold(ctx, m.db, k.id, on, "operator:model", "litigation")
	if err != nil {
		t.Fatal(err)
	}
	if changed != (k.legalHold != on) {
		t.Fatalf("legal hold %v on %s: changed %v, model had %v", on, modelSlots[slot], changed, k.legalHold)
	}
	k.legalHold = on
}

// Age moves an ended key's retention deadlines into the past: its response's, or its row's too.
func (m *claimModel) Age(t *rapid.T) {
	slot := m.slot(t)
	k := m.keys[slot]
	if k == nil || k.state == claim.StateProcessing {
		t.Skip("no ended key")
	}
	whole := rapid.Bool().Draw(t, "whole")
	pgtest.Exec(m.t, m.db, `UPDATE idempotency_keys SET completed_at = CASE WHEN completed_at IS NOT NULL THEN now() - interval '2 hours' END,
		updated_at = now() - interval '2 hours',
		response_expires_at = now() - interval '1 hour', expires_at = CASE WHEN ? THEN now() - interval '1 hour' ELSE expires_at END
		WHERE id = ?`, whole, k.id)
	k.respDue = true
	k.keyDue = k.keyDue || whole
}

// Purge is a retention pass: due answers become tombstones, due rows go; processing keys and
// keys on legal hold stay.
func (m *claimModel) Purge(t *rapid.T) {
	rules := keys.ExpiryRules{}
	if _, err := keys.TombstoneDayResponses(ctx, m.db, rules, time.Now(), 100, "daemon"); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.DeleteExpiredKeys(ctx, m.db, rules, keys.ExpiryCursor{}, 100); err != nil {
		t.Fatal(err)
	}
	for slot, k := range m.keys {
		if k.state == claim.StateProcessing || k.legalHold || unresolved(k) {
			continue
		}
		if k.keyDue {
			delete(m.keys, slot)
		} else if k.respDue {
			k.answer = nil
		}
	}
}

// expectWrite checks a holder write: it lands exactly when the lease is the key's current one;
// otherwise ErrLeaseLost and nothing changed.
func (m *claimModel) expectWrite(t *rapid.T, what string, current bool, err error) {
	switch {
	case current && err != nil:
		t.Fatalf("%s by the live holder: %v", what, err)
	case !current && !errors.Is(err, claim.ErrLeaseLost):
		t.Fatalf("%s by a stale holder: got %v, want ErrLeaseLost", what, err)
	}
}

// Check compares every key of the run's tenant with the model.
func (m *claimModel) Check(t *rapid.T) {
	m.steps.Add(1)
	type row struct {
		ID                                          int64
		Key, State, Fingerprint, ErrorCode          string
		Attempts                                    int
		Token                                       *string
		LeaseExpired, Held, RetryCleared, LegalHold bool
		NeedsAttention                              bool
		Status                                      *int
		Body                                        []byte
	}
	var rows []row
	if err := m.db.Raw(`SELECT id, key, state, fingerprint, coalesce(error_code, '') AS error_code, attempts,
		lease_token::text AS token, coalesce(lease_expires_at < now(), false) AS lease_expired, held, retry_cleared, legal_hold,
		needs_attention, r.status, r.body
		FROM idempotency_keys k LEFT JOIN key_responses r ON r.key_id = k.id AND r.day = k.response_day
		WHERE tenant = ?`, m.tenant).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(m.keys) {
		t.Fatalf("%d rows in the store, the model has %d keys", len(rows), len(m.keys))
	}
	bySlot := map[string]row{}
	for _, r := range rows {
		bySlot[r.Key] = r
	}
	for slot, k := range m.keys {
		r, ok := bySlot[modelSlots[slot]]
		name := modelSlots[slot]
		switch {
		case !ok:
			t.Fatalf("%s: no row, the model has one", name)
		case r.ID != k.id:
			t.Fatalf("%s: row id %d, model %d", name, r.ID, k.id)
		case claim.State(r.State) != k.state:
			t.Fatalf("%s: state %s, model %s", name, r.State, k.state)
		case r.Fingerprint != m.fps[k.intent]:
			t.Fatalf("%s: the fingerprint changed", name)
		case r.Attempts != k.attempts:
			t.Fatalf("%s: attempts %d, model %d", name, r.Attempts, k.attempts)
		case deref(r.Token) != k.token:
			t.Fatalf("%s: lease token %q, model %q", name, deref(r.Token), k.token)
		case k.token != "" && r.LeaseExpired != k.leaseExpired:
			t.Fatalf("%s: lease expired %v, model %v", name, r.LeaseExpired, k.leaseExpired)
		case r.Held != k.held || r.RetryCleared != k.retryCleared || r.LegalHold != k.legalHold:
			t.Fatalf("%s: held %v retry_cleared %v legal_hold %v, model %v %v %v", name, r.Held, r.RetryCleared, r.LegalHold,
				k.held, k.retryCleared, k.legalHold)
		case r.NeedsAttention != k.attention:
			t.Fatalf("%s: needs attention %v, model %v", name, r.NeedsAttention, k.attention)
		case k.state != claim.StateProcessing && r.ErrorCode != k.errorCode:
			t.Fatalf("%s: error code %q, model %q", name, r.ErrorCode, k.errorCode)
		}
		var got *mAnswer
		if r.Status != nil {
			got = &mAnswer{*r.Status, string(r.Body)}
		}
		if !sameAnswer(got, k.answer) {
			t.Fatalf("%s: stored answer %v, model %v", name, got, k.answer)
		}
	}
}

func answerOf(s *claim.Snapshot) *mAnswer {
	if s == nil {
		return nil
	}
	return &mAnswer{s.Status, string(s.Body)}
}

func sameAnswer(a, b *mAnswer) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
