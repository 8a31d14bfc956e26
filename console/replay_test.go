package console

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pagecheck"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/replay"
)

// seedFailed claims a key and fails it (retryably or finally), as a service whose attempt
// ended would.
func (b *bundle) seedFailed(tenant, key, intent string, retryable bool) *claim.Key {
	b.t.Helper()
	ctx := context.Background()
	out, err := b.claims.Claim(ctx, claim.Request{Tenant: tenant, Operation: "payment.charge", Key: key,
		Intent: json.RawMessage(intent), Spec: b.fakeOp.Intent(), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		b.t.Fatalf("seed %s: %v %v", key, out, err)
	}
	f := claim.FinalFailure("declined", "the card was declined", nil)
	if retryable {
		f = claim.RetryableFailure("timeout", "no answer from the channel")
	}
	if err := b.claims.Fail(ctx, nil, out.Lease, f); err != nil {
		b.t.Fatal(err)
	}
	return b.key(out.KeyID)
}

func (b *bundle) key(id int64) *claim.Key {
	b.t.Helper()
	k, err := b.claims.Get(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	return k
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *bundle) token(name string) string {
	b.t.Helper()
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, name, "replay-test", 0)
	if err != nil {
		b.t.Fatal(err)
	}
	return tok
}

func (c *client) apiPost(path, token string, body any) resp {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", c.b.ts.URL+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return c.do(req)
}

var tokenInput = regexp.MustCompile(`name="token" value="([^"]+)"`)

// previewToken opens a key's replay preview as c and returns the page and its confirmation token.
func (c *client) previewToken(keyID int64) (resp, string) {
	c.b.t.Helper()
	got := c.get(fmt.Sprintf("/keys/%d/replay", keyID))
	if got.Status != 200 {
		c.b.t.Fatalf("preview of key %d: status %d", keyID, got.Status)
	}
	m := tokenInput.FindStringSubmatch(got.Body)
	if m == nil {
		return got, ""
	}
	return got, m[1]
}

type apiPreview struct {
	Allowed       bool   `json:"allowed"`
	Outcome       string `json:"outcome"`
	Text          string `json:"text"`
	Token         string `json:"token"`
	NeedsApproval bool   `json:"needs_approval"`
}

func decode[T any](t *testing.T, r resp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
		t.Fatalf("decode %q: %v", truncate(r.Body, 200), err)
	}
	return v
}

type apiConfirm struct {
	Request   replay.Request `json:"request"`
	Duplicate bool           `json:"duplicate"`
}

// TestReplay_RefusedStates: completed (the stored response is shown instead), failed_final, a
// live lease and a key parked in its quarantine are refused, on the page, in the API and at
// confirmation, with the reason; nothing is executed or requested.
func TestReplay_RefusedStates(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	tok := b.token("olga")
	completed := b.seedKey("acme", "payment.charge", "done-1", `{"amount":100,"currency":"USD"}`, true)
	final := b.seedFailed("acme", "final-1", `{"amount":100,"currency":"USD"}`, false)
	live := b.seedKey("acme", "payment.charge", "live-1", `{"amount":100,"currency":"USD"}`, false)
	parked := b.seedKey("acme", "payment.charge", "parked-1", `{"amount":100,"currency":"USD"}`, false)
	b.exec(`UPDATE idempotency_keys SET lease_owner = NULL, lease_token = NULL, not_found_at = now(),
		lease_expires_at = now() + interval '30 seconds' WHERE id = ?`, parked.ID)

	c := b.signIn("olga")
	for _, tc := range []struct {
		k      *claim.Key
		reason string
	}{
		{completed, "stored response is the answer"},
		{final, "failed finally (declined)"},
		{live, "live lease is held by"},
		{b.key(parked.ID), "parked until"},
	} {
		page, token := c.previewToken(tc.k.ID)
		if token != "" || strings.Contains(page.Body, `id="confirm-replay"`) {
			t.Errorf("key %s: the preview offers a confirmation", tc.k.State)
		}
		mustContain(t, "preview of "+string(tc.k.State), page.Body, "Not replayable", tc.reason)
		p := decode[apiPreview](t, c.api(fmt.Sprintf("/api/v1/keys/%d/replay", tc.k.ID), tok))
		if p.Allowed || p.Token != "" || p.Outcome != "refused" || !strings.Contains(p.Text, tc.reason) {
			t.Errorf("API preview of %s: %+v", tc.k.State, p)
		}
		// A confirmation with a valid token for the current version is still refused.
		valid := b.srv.replays.ConfirmToken(replay.ActionReplay, b.ops["olga"].ID, tc.k.ID, tc.k.Version)
		got := c.post(fmt.Sprintf("/keys/%d/replay", tc.k.ID), url.Values{"token": {valid}, "reason": {"try"}}, true)
		if got.Status != http.StatusConflict || !strings.Contains(got.Body, tc.reason) {
			t.Errorf("confirm %s: status %d, want 409 with %q", tc.k.State, got.Status, tc.reason)
		}
		got = c.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", tc.k.ID), tok, map[string]string{"token": valid, "reason": "try"})
		if got.Status != http.StatusConflict || !strings.Contains(got.Body, tc.reason) {
			t.Errorf("API confirm %s: status %d %s", tc.k.State, got.Status, got.Body)
		}
	}
	mustContain(t, "completed preview", c.get(fmt.Sprintf("/keys/%d/replay", completed.ID)).Body,
		"The stored response", "Status 201", "ch_done-1")
	if n := b.count(`SELECT count(*) FROM replay_requests`); n != 0 {
		t.Errorf("%d replay requests recorded for refused keys", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.refused' AND actor = 'operator:olga'`); n != 8 {
		t.Errorf("refused confirmations audited: %d, want 8", n)
	}
	if n := b.fakeOp.executes.Load(); n != 0 {
		t.Errorf("executions: %d", n)
	}
	// A token needs a reason, and a forged token is no confirmation.
	retry := b.seedFailed("acme", "retry-1", `{"amount":100,"currency":"USD"}`, true)
	_, token := c.previewToken(retry.ID)
	if got := c.post(fmt.Sprintf("/keys/%d/replay", retry.ID), url.Values{"token": {token}, "reason": {"  "}}, true); got.Status != 400 ||
		!strings.Contains(got.Body, "reason: say why") {
		t.Errorf("confirm without a reason: %d", got.Status)
	}
	if got := c.post(fmt.Sprintf("/keys/%d/replay", retry.ID), url.Values{"token": {token + "0"}, "reason": {"x"}}, true); got.Status != 400 {
		t.Errorf("confirm with a forged token: %d", got.Status)
	}
	if got := c.post(fmt.Sprintf("/keys/%d/replay", completed.ID), url.Values{"token": {token}, "reason": {"x"}}, true); got.Status != 400 {
		t.Errorf("another key's token: %d, want 400", got.Status)
	}
}

// TestReplay_TwoConfirmsWithOneTokenExecuteOnce: a double-submitted confirmation (two at once,
// then a third later) executes the replay once; the others answer the same request.
func TestReplay_TwoConfirmsWithOneTokenExecuteOnce(t *testing.T) {
	// The page's double submit below holds its key through the quarantine: its confirm answers
	// after ReplayAnswerWait, kept short here.
	b := setup(t, func(c *Config) { c.ReplayAnswerWait = time.Second })
	b.addOperator("olga", access.RoleOperator, "acme")
	tok := b.token("olga")
	k := b.seedKey("acme", "payment.charge", "stuck-1", `{"amount":1234,"currency":"CNY","payee":"alice"}`, false)
	// The first not-found a quarantine ago, and the parking lease over: the replay sends now.
	b.exec(`UPDATE idempotency_keys SET lease_owner = NULL, lease_token = NULL, not_found_at = now() - interval '1 hour',
		lease_expires_at = now() - interval '1 second' WHERE id = ?`, k.ID)

	c := b.signIn("olga")
	p := decode[apiPreview](t, c.api(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), tok))
	if !p.Allowed || p.Outcome != string(replay.PredictSend) || !strings.Contains(p.Text, "not found — a charge of 12.34 CNY to alice will be sent now") {
		t.Fatalf("preview: %+v", p)
	}
	body := map[string]string{"token": p.Token, "reason": "customer called: charge never arrived"}
	var wg sync.WaitGroup
	answers := make([]resp, 2)
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			answers[i] = c.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), tok, body)
		}(i)
	}
	wg.Wait()
	statuses := map[int]int{}
	var ids []int64
	for _, a := range answers {
		statuses[a.Status]++
		if a.Status == 200 || a.Status == 201 {
			ids = append(ids, decode[apiConfirm](t, a).Request.ID)
		}
	}
	if statuses[201] != 1 || statuses[200] != 1 || len(ids) != 2 || ids[0] != ids[1] {
		t.Fatalf("two confirms with one token: statuses %v, request ids %v; want one 201 and one 200 naming the same request", statuses, ids)
	}
	third := decode[apiConfirm](t, c.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), tok, body))
	if !third.Duplicate || third.Request.ID != ids[0] || third.Request.State != "executed" || *third.Request.OutcomeKind != "sent" {
		t.Errorf("a later confirm with the same token: %+v", third)
	}
	if n := b.fakeOp.executes.Load(); n != 1 {
		t.Errorf("executions: %d, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests`); n != 1 {
		t.Errorf("replay requests: %d, want 1", n)
	}
	if got := b.key(k.ID); got.State != claim.StateCompleted {
		t.Errorf("key state %s, want completed", got.State)
	}
	// The page's double submit lands on the same request too.
	k2 := b.seedFailed("acme", "retry-2", `{"amount":500,"currency":"USD"}`, true)
	_, token := c.previewToken(k2.ID)
	form := url.Values{"token": {token}, "reason": {"retry after the outage"}}
	first := c.post(fmt.Sprintf("/keys/%d/replay", k2.ID), form, true)
	second := c.post(fmt.Sprintf("/keys/%d/replay", k2.ID), form, true)
	if first.Status != 303 || second.Location != first.Location {
		t.Errorf("page double submit: %d → %q, then %d → %q", first.Status, first.Location, second.Status, second.Location)
	}
}

// TestReplay_StaleTokenAfterTheKeyChangedIsRefused: a confirmation of a preview taken before the
// key moved on executes nothing and says why.
func TestReplay_StaleTokenAfterTheKeyChangedIsRefused(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedFailed("acme", "retry-1", `{"amount":100,"currency":"USD"}`, true)
	c := b.signIn("olga")
	_, token := c.previewToken(k.ID)
	if token == "" {
		t.Fatal("no confirmation token on the preview of a failed_retryable key")
	}
	// Meanwhile the client retried: its attempt took the key over and failed again.
	ctx := context.Background()
	l, err := b.claims.Takeover(ctx, k.ID, "service:payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.claims.Fail(ctx, nil, l, claim.RetryableFailure("timeout", "again")); err != nil {
		t.Fatal(err)
	}
	got := c.post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {token}, "reason": {"retry"}}, true)
	if got.Status != http.StatusConflict {
		t.Fatalf("stale confirm: status %d, want 409", got.Status)
	}
	mustContain(t, "stale confirm", got.Body, fmt.Sprintf("the key changed since the preview (version %d, now %d)", k.Version, k.Version+2))
	if n := b.fakeOp.executes.Load(); n != 0 {
		t.Errorf("executions: %d", n)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests`); n != 0 {
		t.Errorf("replay requests: %d", n)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.refused'`); n != 1 {
		t.Errorf("refusal audited %d times", n)
	}
}

// TestReplay_FourEyes: above the approval amount a replay waits; the requester cannot approve
// it, a viewer cannot, a second operator can, and then it runs once.
func TestReplay_FourEyes(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("oscar", access.RoleOperator, "acme")
	b.addOperator("vic", access.RoleViewer, "acme")
	k := b.seedFailed("acme", "big-1", `{"amount":250000,"currency":"USD","payee":"bigco"}`, true)
	b.fakeOp.has(k, "ch_big")
	olga := b.signIn("olga")
	page, token := olga.previewToken(k.ID)
	mustContain(t, "preview", page.Body, "the channel already has this charge (ch_big) — it will be recorded, nothing is sent",
		"above the approval threshold", "Request replay")
	got := olga.post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {token}, "reason": {"recover the big one"}}, true)
	if got.Status != 303 {
		t.Fatalf("request: %d", got.Status)
	}
	reqPath := got.Location
	mustContain(t, "request page", olga.get(reqPath).Body, "pending", "waiting for a second operator")
	if b.key(k.ID).State != claim.StateFailedRetryable {
		t.Fatal("the key moved before the approval")
	}
	if got := olga.post(reqPath+"/approve", nil, true); got.Status != http.StatusForbidden ||
		!strings.Contains(got.Body, "a second operator must approve it") {
		t.Errorf("self-approval: %d", got.Status)
	}
	tok := b.token("olga")
	if got := olga.apiPost("/api/v1"+reqPath+"/approve", tok, map[string]string{}); got.Status != http.StatusForbidden {
		t.Errorf("self-approval through the API: %d", got.Status)
	}
	if got := b.signIn("vic").post(reqPath+"/approve", nil, true); got.Status != http.StatusForbidden {
		t.Errorf("viewer approval: %d", got.Status)
	}
	oscar := b.signIn("oscar")
	mustContain(t, "oscar's replays page", oscar.get("/replays").Body, "Waiting for approval", "recover the big one")
	if got := oscar.post(reqPath+"/approve", nil, true); got.Status != 303 {
		t.Fatalf("approval: %d", got.Status)
	}
	done := oscar.get(reqPath).Body
	mustContain(t, "approved request", done, "executed", "approved by oscar", "recorded: the channel already had it (ch_big); nothing was sent")
	if got := oscar.post(reqPath+"/approve", nil, true); got.Status != http.StatusConflict {
		t.Errorf("second approval: %d, want 409", got.Status)
	}
	if n := b.fakeOp.executes.Load(); n != 0 {
		t.Errorf("executions: %d (downstream had it)", n)
	}
	evs, _ := b.claims.History(context.Background(), k.ID, 0)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind+"/"+e.Actor)
	}
	want := "replay_requested/operator:olga replay_approved/operator:oscar taken_over/operator:olga recovered_from_downstream/operator:olga"
	if got := strings.Join(kinds, " "); !strings.HasSuffix(got, want) {
		t.Errorf("history %q, want it to end with %q", got, want)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action IN ('replay.request', 'replay.approve_refused', 'replay.approve', 'replay.execute')`); n != 5 {
		t.Errorf("audit rows of the four-eyes flow: %d, want 5 (request, 2 refused self-approvals, approve, execute)", n)
	}
}

// runReclaimer runs the daemon's reclaimer over held every 200 ms, as a leader would, until the
// returned stop is called (it waits for the last run to end).
func (b *bundle) runReclaimer(held *claim.Store) (stop func()) {
	b.t.Helper()
	reclaim, err := daemon.NewReclaimJob(held, oneOperation{b.fakeOp}, daemon.ReclaimConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := reclaim.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil && ctx.Err() == nil {
				b.t.Errorf("reclaim: %v", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// TestReplay_HoldsItsKeyThroughTheQuarantineWithTheReclaimerRunning: a confirmed replay that
// meets a first not-found keeps the key, waits the quarantine out itself (its page counting
// down), looks again and sends — while the daemon's reclaimer runs all along and takes nothing
// over. One confirmation, one outcome, one execution.
func TestReplay_HoldsItsKeyThroughTheQuarantineWithTheReclaimerRunning(t *testing.T) {
	t.Parallel()
	// The quarantine outlasts the time the confirm waits for its replay (ReplayAnswerWait), so
	// the confirm answers while the replay holds the key.
	const quarantine = 3 * time.Second
	var held *claim.Store
	b := newBundle(t, func(c *Config) {
		st, err := claim.NewStore(c.DB, claim.Config{DigestSecret: testSecret, LeaseTTL: time.Second, Quarantine: quarantine})
		if err != nil {
			t.Fatal(err)
		}
		c.Claims, held, c.ReplayAnswerWait = st, st, time.Second
	})
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedFailed("acme", "lost-1", `{"amount":1234,"currency":"CNY","payee":"alice"}`, true)
	defer b.runReclaimer(held)() // the reclaimer runs for the whole test

	c := b.signIn("olga")
	page, token := c.previewToken(k.ID)
	mustContain(t, "preview", page.Body, "will be sent after a second check, one quarantine (3 s) later")
	got := c.post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {token}, "reason": {"lost charge"}}, true)
	live := c.get(got.Location).Body
	mustContain(t, "page while the replay waits", live, "This replay holds the key and looks again at")
	mustContain(t, "live refresh", live, `hx-trigger="every 2s"`)
	if k := b.key(k.ID); k.State != claim.StateProcessing || k.LeaseOwner == nil {
		t.Fatalf("while waiting: state %s, owner %v; want processing, held", k.State, k.LeaseOwner)
	}
	var body string
	pgtest.Await(t, b.db, quarantine+10*time.Second, "the replay's outcome", func() bool {
		body = c.get(got.Location).Body
		return strings.Contains(pagecheck.Text(body), "sent: downstream created ch_sent_")
	}, "replay_requests")
	mustContain(t, "outcome", body, "sent: downstream created ch_sent_")
	if strings.Contains(body, `hx-trigger="every 2s"`) {
		t.Error("the finished replay's page still refreshes itself")
	}
	if n := b.fakeOp.executes.Load(); n != 1 || b.key(k.ID).State != claim.StateCompleted {
		t.Errorf("executes %d, state %s; want one execution, completed", n, b.key(k.ID).State)
	}
	var hist []string
	evs, err := held.History(context.Background(), k.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		hist = append(hist, e.Kind+":"+e.Actor)
		if e.Actor == "daemon" {
			t.Errorf("the reclaimer touched the key while the replay held it: %s", e.Kind)
		}
	}
	if n := b.count(`SELECT count(*) FROM replay_requests WHERE key_id = ?`, k.ID); n != 1 {
		t.Errorf("%d replay requests, want 1 (no second confirmation)", n)
	}
	t.Logf("history: %v", hist)
}

// TestMarkFinal_AdminOnlyAuditedAndInHistory: an administrator moves a stuck key to
// failed_final with a reason; an operator may not; a stale page is refused.
func TestMarkFinal_AdminOnlyAuditedAndInHistory(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("ada", access.RoleAdmin, "*")
	k := b.seedKey("acme", "payment.charge", "stuck-1", `{"amount":100,"currency":"USD"}`, false)
	b.exec(`UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id = ?`, k.ID)
	olga := b.signIn("olga")
	if page, _ := olga.previewToken(k.ID); strings.Contains(page.Body, "Mark final") {
		t.Error("an operator is offered mark final")
	}
	ada := b.signIn("ada")
	page := ada.get(fmt.Sprintf("/keys/%d/replay", k.ID)).Body
	m := regexp.MustCompile(`action="/keys/\d+/final"[^>]*>\s*<input type="hidden" name="csrf" value="[^"]+">\s*<input type="hidden" name="token" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no mark-final form for the admin")
	}
	finalToken := m[1]
	if got := olga.post(fmt.Sprintf("/keys/%d/final", k.ID), url.Values{"token": {finalToken}, "reason": {"x"}}, true); got.Status != 403 {
		t.Errorf("operator mark final: %d", got.Status)
	}
	if got := ada.post(fmt.Sprintf("/keys/%d/final", k.ID), url.Values{"token": {finalToken}, "reason": {"channel confirmed it never arrived; customer refunded by hand"}}, true); got.Status != 303 {
		t.Fatalf("admin mark final: %d", got.Status)
	}
	if got := b.key(k.ID); got.State != claim.StateFailedFinal || *got.ErrorCode != "marked_final" {
		t.Errorf("after mark final: %s", got.State)
	}
	if got := ada.post(fmt.Sprintf("/keys/%d/final", k.ID), url.Values{"token": {finalToken}, "reason": {"again"}}, true); got.Status != 409 {
		t.Errorf("a second mark final with the same page: %d, want 409", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'key.mark_final' AND actor = 'operator:ada' AND target = ?`, fmt.Sprintf("key:%d", k.ID)); n != 1 {
		t.Errorf("mark final audit rows: %d", n)
	}
	mustContain(t, "key page", ada.get(fmt.Sprintf("/keys/%d", k.ID)).Body, "marked_final", "operator:ada", "customer refunded by hand")
}

// TestReplay_ViewerCannotReplay: a viewer sees no replay and every replay POST is refused.
func TestReplay_ViewerCannotReplay(t *testing.T) {
	b := setup(t)
	b.addOperator("vic", access.RoleViewer, "acme")
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedFailed("acme", "retry-1", `{"amount":100,"currency":"USD"}`, true)
	vic := b.signIn("vic")
	if body := vic.get(fmt.Sprintf("/keys/%d", k.ID)).Body; strings.Contains(body, "Preview a replay") {
		t.Error("the viewer's key page offers a replay")
	}
	valid := b.srv.replays.ConfirmToken(replay.ActionReplay, b.ops["vic"].ID, k.ID, k.Version)
	if got := vic.post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {valid}, "reason": {"x"}}, true); got.Status != 403 {
		t.Errorf("viewer confirm: %d", got.Status)
	}
	if got := vic.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), b.token("vic"), map[string]string{"token": valid, "reason": "x"}); got.Status != 403 {
		t.Errorf("viewer API confirm: %d", got.Status)
	}
	// An operator's token is no use to anyone else.
	olgaToken := b.srv.replays.ConfirmToken(replay.ActionReplay, b.ops["olga"].ID, k.ID, k.Version)
	b.addOperator("oscar", access.RoleOperator, "acme")
	if got := b.signIn("oscar").post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {olgaToken}, "reason": {"x"}}, true); got.Status != 400 {
		t.Errorf("another operator's token: %d, want 400", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests`); n != 0 || b.fakeOp.executes.Load() != 0 {
		t.Errorf("requests %d, executions %d", n, b.fakeOp.executes.Load())
	}
}

// runJobs starts the bundle's daemon replica (startDaemon) unless it runs already.
func (b *bundle) runJobs() {
	b.t.Helper()
	if b.daemon == nil {
		b.startDaemon()
	}
}

// waitBulk runs the daemon's jobs and waits for a bulk run to finish, or to wait for its parked
// keys' re-check (bounded).
func (b *bundle) waitBulk(id int64) {
	b.t.Helper()
	b.runJobs()
	pgtest.Await(b.t, b.db, 15*time.Second, fmt.Sprintf("bulk run %d to finish", id), func() bool {
		return b.count(`SELECT count(*) FROM replay_bulk_runs WHERE id = ? AND state IN ('done', 'waiting', 'cancelled', 'failed')`, id) == 1
	}, "replay_bulk_runs")
}

// bulkRows counts what a bulk preview must not write: runs, items, replay requests, audit rows.
func (b *bundle) bulkRows() [4]int64 {
	return [4]int64{b.count(`SELECT count(*) FROM replay_bulk_runs`), b.count(`SELECT count(*) FROM replay_bulk_items`),
		b.count(`SELECT count(*) FROM replay_requests`), b.count(`SELECT count(*) FROM audit_log`)}
}

var (
	bulkPlanRe  = regexp.MustCompile(`name="plan" value="([^"]*)"`)
	bulkTokenRe = regexp.MustCompile(`name="token" value="([^"]*)"`)
)

// bulkStartForm reads the start form's hidden plan and token off a bulk preview page.
func bulkStartForm(t *testing.T, page string) url.Values {
	t.Helper()
	p, k := bulkPlanRe.FindStringSubmatch(page), bulkTokenRe.FindStringSubmatch(page)
	if p == nil || k == nil {
		t.Fatalf("no start form on the bulk preview: %s", truncate(page, 300))
	}
	return url.Values{"plan": {html.UnescapeString(p[1])}, "token": {html.UnescapeString(k[1])}}
}

// TestBulkReplay_PreviewCountsGuardsCapAndResults: a bulk replay of a search previews counts by
// state and outcome without writing anything, takes at most the cap, is started once with a
// reason (creating the run then), applies the single replay's guards per key and records each
// key's result.
func TestBulkReplay_PreviewCountsGuardsCapAndResults(t *testing.T) {
	b := setup(t, func(c *Config) { c.BulkCap = 6 })
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("oscar", access.RoleOperator, "acme")
	found := b.seedFailed("acme", "b-found", `{"amount":100,"currency":"USD"}`, true)
	b.fakeOp.has(found, "ch_found")
	b.seedFailed("acme", "b-lost", `{"amount":200,"currency":"USD"}`, true)
	b.seedFailed("acme", "b-big", `{"amount":300000,"currency":"USD"}`, true)
	b.seedKey("acme", "payment.charge", "b-done", `{"amount":400,"currency":"USD"}`, true)
	b.seedKey("acme", "payment.charge", "b-live", `{"amount":500,"currency":"USD"}`, false)
	b.seedFailed("acme", "b-final", `{"amount":600,"currency":"USD"}`, false)
	oldest := b.seedFailed("acme", "b-oldest", `{"amount":700,"currency":"USD"}`, true)
	b.exec(`UPDATE idempotency_keys SET created_at = now() - interval '1 day' WHERE id = ?`, oldest.ID)
	b.seedKey("globex", "payment.charge", "b-other-tenant", `{"amount":1,"currency":"USD"}`, false)

	c := b.signIn("olga")
	before := b.bulkRows()
	got := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"all"}}, true)
	if got.Status != 200 {
		t.Fatalf("bulk preview: %d %s", got.Status, truncate(got.Body, 300))
	}
	page := got.Body
	mustContain(t, "bulk preview", page, "this run covers the newest 6", "already at the channel: recorded, nothing sent",
		"not found once: parked for the quarantine, then re-checked", "refused by a guard", `id="start-bulk"`)
	plan := decode[replay.BulkPlan](t, c.apiPost("/api/v1/replays/bulk", b.token("olga"), map[string]any{"filter": map[string]string{"tenant": "acme"}}))
	if plan.Total != 6 || !plan.Capped || plan.Counts.ByState["failed_retryable"] != 3 || plan.Counts.ByState["completed"] != 1 ||
		plan.Counts.ByOutcome["recorded"] != 1 || plan.Counts.ByOutcome["not_found_once"] != 2 || plan.Counts.ByOutcome["refused"] != 3 ||
		len(plan.Items) != 6 || plan.Token == "" {
		t.Fatalf("preview: total %d capped %v counts %+v items %d", plan.Total, plan.Capped, plan.Counts, len(plan.Items))
	}
	if after := b.bulkRows(); after[0] != before[0] || after[1] != before[1] || after[2] != before[2] {
		t.Fatalf("previews wrote runs/items/requests: %v → %v", before, after)
	}
	form := bulkStartForm(t, page)
	form.Set("reason", "")
	if got := c.post("/replays/bulk/start", form, true); got.Status != 400 {
		t.Errorf("start without a reason: %d", got.Status)
	}
	if got := b.signIn("oscar").post("/replays/bulk/start", url.Values{"plan": form["plan"], "token": form["token"], "reason": {"mine now"}}, true); got.Status != 400 {
		t.Errorf("another operator starts olga's preview: %d, want 400", got.Status)
	}
	form.Set("reason", "channel outage 10:00-10:20")
	got = c.post("/replays/bulk/start", form, true)
	if got.Status != 303 {
		t.Fatalf("start: %d %s", got.Status, truncate(got.Body, 300))
	}
	runPath := got.Location
	if again := c.post("/replays/bulk/start", form, true); again.Status != 409 || !strings.Contains(again.Body, "already started as bulk replay") {
		t.Errorf("second start of one preview: %d %s, want 409", again.Status, truncate(again.Body, 200))
	}
	if n := b.count(`SELECT count(*) FROM replay_bulk_runs`); n != 1 {
		t.Errorf("bulk runs after two starts: %d, want 1", n)
	}
	if got := b.signIn("oscar").get(runPath); got.Status != 404 {
		t.Errorf("another operator opens the run: %d, want 404", got.Status)
	}
	var id int64
	fmt.Sscanf(runPath, "/replays/bulk/%d", &id)
	b.waitBulk(id)
	// The lost key was parked (not found once; the big one waits for approval): the run is not
	// done but waits for its re-check, says when, and its page keeps refreshing.
	progress := c.get(runPath + "/progress").Body
	if !strings.Contains(progress, "hx-get") || strings.Contains(progress, `data-state="done"`) {
		t.Errorf("the waiting run's progress partial does not poll, or says done: %s", truncate(progress, 300))
	}
	mustContain(t, "waiting", progress, `id="bulk-waiting"`, "1 parked: downstream said not found once", "next check in ", "(check 1 of 5)")
	mustContain(t, "results", progress, "6 of 6", "recorded: the channel already had it (ch_found)", "not found once",
		"waiting for a second operator", "stored response is the answer", "live lease", "failed finally")
	run := decode[struct {
		Run struct {
			Total  int    `json:"total"`
			Capped bool   `json:"capped"`
			State  string `json:"state"`
		} `json:"run"`
		Items []replay.BulkItem `json:"items"`
	}](t, c.api("/api/v1"+runPath, b.token("olga")))
	if run.Run.Total != 6 || !run.Run.Capped || run.Run.State != "waiting" || len(run.Items) != 6 || run.Items[0].Result == nil {
		t.Errorf("run: %+v, %d items", run.Run, len(run.Items))
	}
	if n := b.fakeOp.executes.Load(); n != 0 {
		t.Errorf("executions: %d (no key was proven absent)", n)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests WHERE bulk_run_id = ?`, id); n != 3 {
		t.Errorf("requests of the run: %d, want 3 (found, lost, big)", n)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests WHERE bulk_run_id = ? AND state = 'pending'`, id); n != 1 {
		t.Errorf("pending requests of the run: %d, want 1 (the big one)", n)
	}
	if b.key(oldest.ID).State != claim.StateFailedRetryable {
		t.Error("a key beyond the cap was replayed")
	}
	// Not done while a key waits: no bulk_done yet.
	for action, want := range map[string]int64{"replay.bulk_preview": 0, "replay.bulk_start": 1, "replay.bulk_done": 0} {
		if n := b.count(`SELECT count(*) FROM audit_log WHERE action = ? AND target = ?`, action, fmt.Sprintf("bulk:%d", id)); n != want {
			t.Errorf("audit %s: %d, want %d", action, n, want)
		}
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_start' AND detail::jsonb->>'reason' = 'channel outage 10:00-10:20'
		AND jsonb_array_length(detail::jsonb->'keys') = 6`); n != 1 {
		t.Errorf("the start's audit row does not carry the selection (%d)", n)
	}
}

// oneOperation is the daemon's registry of the console tests: the bundle's fake operation.
type oneOperation struct{ op *fakeOp }

func (o oneOperation) Get(name string) (claim.Operation, bool) { return o.op, name == o.op.name }

// TestReleaseForRetry_HeldKeyAdminOnlyAudited: a key held after a 5xx on a route with external
// effects (its answer replayed) is released by an administrator with a reason, through the
// claim logic and audited; the next client retry then executes (attempt 2) without a lookup.
func TestReleaseForRetry_HeldKeyAdminOnlyAudited(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("ada", access.RoleAdmin, "*")
	ctx := context.Background()
	req := claim.Request{Tenant: "acme", Operation: "mail.send", Key: "held-1", Intent: json.RawMessage(`{"to":"a"}`), Actor: "service:test"}
	out, err := b.claims.Claim(ctx, req)
	if err != nil || out.Kind != claim.Acquired {
		t.Fatal(out, err)
	}
	snap := &claim.Snapshot{Status: 500, Body: []byte(`{"type":"/problems/internal"}`)}
	if err := b.claims.Fail(ctx, nil, out.Lease, claim.HeldFailure("http_500", "Internal Server Error", snap)); err != nil {
		t.Fatal(err)
	}
	if again, _ := b.claims.Claim(ctx, req); again.Kind != claim.Replay || again.Snapshot.Status != 500 {
		t.Fatalf("a held key answers %s", again.Kind)
	}
	if page := b.signIn("olga").get(fmt.Sprintf("/keys/%d/replay", out.KeyID)).Body; strings.Contains(page, "Release for retry") {
		t.Error("an operator is offered the release")
	}
	ada := b.signIn("ada")
	page := ada.get(fmt.Sprintf("/keys/%d/replay", out.KeyID)).Body
	mustContain(t, "preview", page, "The key is held")
	m := regexp.MustCompile(`action="/keys/\d+/release"[^>]*>\s*<input type="hidden" name="csrf" value="[^"]+">\s*<input type="hidden" name="token" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no release form for the admin")
	}
	if got := ada.post(fmt.Sprintf("/keys/%d/release", out.KeyID), url.Values{"token": {m[1]}, "reason": {"mail server log: nothing sent"}}, true); got.Status != 303 {
		t.Fatalf("admin release: %d", got.Status)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'key.release_for_retry' AND actor = 'operator:ada' AND target = ?`, fmt.Sprintf("key:%d", out.KeyID)); n != 1 {
		t.Errorf("release audit rows: %d", n)
	}
	if got := ada.post(fmt.Sprintf("/keys/%d/release", out.KeyID), url.Values{"token": {m[1]}, "reason": {"again"}}, true); got.Status != 409 {
		t.Errorf("a second release with the same page: %d, want 409", got.Status)
	}
	retry, err := b.claims.Claim(ctx, req)
	if err != nil || retry.Kind != claim.Acquired || retry.Lease.Attempt != 2 || retry.Lease.MustCheckDownstream() {
		t.Fatalf("retry after release: %+v %v", retry, err)
	}
	mustContain(t, "key page", ada.get(fmt.Sprintf("/keys/%d", out.KeyID)).Body, "released_for_retry", "nothing sent")
}

// TestBulkReplay_AllRefusedCannotStart: a search whose every key a guard refuses previews with
// the start button disabled and the reason beside it; starting it anyway (with a valid
// confirmation from the API) is refused (409) and writes nothing.
func TestBulkReplay_AllRefusedCannotStart(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.seedKey("acme", "payment.charge", "r-done", `{"amount":400,"currency":"USD"}`, true)
	b.seedFailed("acme", "r-final", `{"amount":600,"currency":"USD"}`, false)
	c := b.signIn("olga")
	got := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"all"}}, true)
	if got.Status != 200 {
		t.Fatalf("bulk preview: %d %s", got.Status, truncate(got.Body, 300))
	}
	mustContain(t, "all-refused preview", got.Body, `id="start-bulk-disabled"`, "disabled", "a guard refuses all 2 keys")
	mustNotContain(t, "all-refused preview", got.Body, `id="start-bulk"`)
	plan := decode[replay.BulkPlan](t, c.apiPost("/api/v1/replays/bulk", b.token("olga"), map[string]any{"filter": map[string]string{"tenant": "acme"}}))
	before := b.bulkRows()
	start := c.post("/replays/bulk/start", url.Values{"plan": {plan.Plan}, "token": {plan.Token}, "reason": {"try anyway"}}, true)
	if start.Status != 409 || !strings.Contains(start.Body, "nothing to start") {
		t.Errorf("start of an all-refused selection: %d %s", start.Status, truncate(start.Body, 200))
	}
	if after := b.bulkRows(); after != before {
		t.Errorf("a refused start wrote rows: %v → %v", before, after)
	}
}
