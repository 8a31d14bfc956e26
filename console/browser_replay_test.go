package console

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// browseReplaysAndJobs drives the replay flow and the jobs page in headless Chromium: a
// preview that finds the charge downstream and its confirmation, a stale confirmation refused,
// a four-eyes request approved by a second operator, a bulk replay with live progress, and the
// jobs page running a job with live progress. Screenshots: see screenshotDir.
func browseReplaysAndJobs(t *testing.T, br *browser) {
	// The quarantine (3 s) outlasts the time a confirm waits for its replay (ReplayAnswerWait,
	// 1 s here), so the approved request's page shows it waiting; the default 30 s would only make
	// the bulk run's keys wait longer for their second look.
	b := newBundle(t, func(c *Config) {
		st, err := claim.NewStore(c.DB, claim.Config{DigestSecret: testSecret, Quarantine: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.Claims, c.ReplayAnswerWait = st, time.Second
	})
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("oscar", access.RoleOperator, "*") // runs the sweep, every tenant's schedule
	found := b.seedFailed("acme", "order-found", `{"amount":1234,"currency":"CNY","payee":"alice"}`, true)
	b.fakeOp.has(found, "ch_found_1")
	stale := b.seedFailed("acme", "order-stale", `{"amount":500,"currency":"USD","payee":"bob"}`, true)
	big := b.seedFailed("acme", "order-big", `{"amount":250000,"currency":"USD","payee":"bigco"}`, true)
	for i := 0; i < 4; i++ {
		b.seedFailed("acme", fmt.Sprintf("order-bulk-%d", i), fmt.Sprintf(`{"amount":%d,"currency":"EUR","payee":"carol"}`, 100+i), true)
	}
	job := b.startDaemon()

	br.use(t, b)
	base := br.base
	br.signIn("olga")

	// A replay whose preview finds the charge: recorded, nothing sent.
	br.step("open the key", chromedp.Navigate(fmt.Sprintf("%s/keys/%d", base, found.ID)), chromedp.WaitVisible(`#replay-link`))
	br.step("preview", chromedp.Click(`#replay-link`), chromedp.WaitVisible(`#preview-text`))
	if got := br.text(`#preview-text`); got != "the channel already has this charge (ch_found_1) — it will be recorded, nothing is sent" {
		t.Errorf("preview text %q", got)
	}
	br.step("reason", chromedp.SendKeys(`textarea[name=reason]`, "customer says it was charged; record it"))
	br.shot("replay-preview")
	// A replay that outlasts the confirm's wait is followed live by its page (every 2 s).
	br.step("confirm", chromedp.Click(`#confirm-replay`), chromedp.WaitVisible(`#replay-request`),
		chromedp.Poll[chromedp.Void](`(() => { const o = document.querySelector('#replay-outcome'); return !!o && o.textContent.trim() !== ''; })()`,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if got := br.text(`#replay-outcome`); !strings.Contains(got, "recorded: the channel already had it (ch_found_1); nothing was sent") {
		t.Errorf("outcome %q", got)
	}
	br.shot("replay-done")
	if n := b.fakeOp.executes.Load(); n != 0 {
		t.Errorf("executions: %d", n)
	}

	// A stale confirmation: the key changed while the preview was open.
	br.step("preview the stale key", chromedp.Navigate(fmt.Sprintf("%s/keys/%d/replay", base, stale.ID)), chromedp.WaitVisible(`#confirm-replay`))
	l, err := b.claims.Takeover(context.Background(), stale.ID, "service:payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.claims.Release(context.Background(), l, "client retry gave up"); err != nil {
		t.Fatal(err)
	}
	br.step("confirm stale", chromedp.SendKeys(`textarea[name=reason]`, "retry"), chromedp.Click(`#confirm-replay`),
		chromedp.WaitVisible(`#replay-error`))
	if got := br.text(`#replay-error`); !strings.Contains(got, "the key changed since the preview") {
		t.Errorf("stale confirmation: %q", got)
	}
	br.shot("replay-refused-stale")

	// Four eyes: olga requests, oscar approves.
	br.step("preview the big key", chromedp.Navigate(fmt.Sprintf("%s/keys/%d/replay", base, big.ID)), chromedp.WaitVisible(`#confirm-replay`))
	br.step("request", chromedp.SendKeys(`textarea[name=reason]`, "large charge lost in the outage"), chromedp.Click(`#confirm-replay`),
		chromedp.WaitVisible(`#replay-request`))
	if got := br.text(`#replay-state`); got != "pending" {
		t.Errorf("four-eyes request state %q", got)
	}
	br.shot("replay-pending")
	br.signOut()
	br.signIn("oscar")
	br.step("replays", chromedp.Navigate(base+"/replays"), chromedp.WaitVisible(`table.replays`))
	br.shot("replays")
	br.step("open the pending request", chromedp.Click(`table.replays a`), chromedp.WaitVisible(`#approve-replay`))
	br.step("approve", chromedp.Click(`#approve-replay`), chromedp.WaitNotPresent(`#approve-replay`))
	// Downstream has no such charge: the replay holds the key through the quarantine and its page
	// counts down.
	if got := br.text(`#replay-state`); got != "executing" {
		t.Errorf("after approval: %q, want executing (waiting out the quarantine)", got)
	}
	if got := br.text(`#replay-waiting`); !strings.Contains(got, "This replay holds the key and looks again at") {
		t.Errorf("after approval, waiting: %q", got)
	}
	br.shot("replay-approved-waiting")

	// A bulk replay of the EUR keys, with live progress.
	br.step("search", chromedp.Navigate(base+"/keys?state=failed_retryable&field=currency&value=EUR"), chromedp.WaitVisible(`table.keys`))
	// Ticking every key of the page offers every key matching the filter (River UI #590).
	br.step("select the page", chromedp.WaitVisible(`#select-page`), chromedp.Click(`#select-page`), chromedp.WaitVisible(`#select-all-banner`))
	if got := br.text(`#select-all-banner`); !strings.Contains(got, "All 4 keys on this page are selected.") || !strings.Contains(got, "Select all 4 keys matching this filter") {
		t.Errorf("select-all banner %q", got)
	}
	br.shot("bulk-select-all")
	br.submit("bulk preview", `#select-all-matching`)
	br.step("bulk preview", chromedp.WaitVisible(`#start-bulk-confirm summary`), chromedp.Click(`#start-bulk-confirm summary`),
		chromedp.WaitVisible(`#bulk-form`))
	if n := b.count(`SELECT count(*) FROM replay_bulk_runs`); n != 0 {
		t.Errorf("the bulk preview stored %d runs, want none", n)
	}
	if got := br.text(`#start-bulk-confirm .consequence`); !strings.Contains(got, "Each key is replayed now") {
		t.Errorf("the bulk start's confirmation says %q, want its consequence", got)
	}
	br.shot("bulk-preview")
	br.step("start bulk", chromedp.SendKeys(`#bulk-form textarea[name=reason]`, "channel outage 10:00-10:20"),
		chromedp.Click(`#start-bulk`), chromedp.WaitVisible(`#bulk-progress[data-state=done]`))
	if got := br.text(`#bulk-count`); got != "4 of 4" {
		t.Errorf("bulk progress %q", got)
	}
	br.shot("bulk-done")
	// A selection a guard refuses entirely (the recorded key is completed): the start is disabled
	// and says why.
	br.step("refused-only search", chromedp.Navigate(base+"/keys?tenant=acme&state=completed"), chromedp.WaitVisible(`#select-page`),
		chromedp.Click(`#select-page`), chromedp.WaitVisible(`#select-all-matching`), chromedp.Click(`#select-all-matching`),
		chromedp.WaitVisible(`#start-bulk-disabled`))
	if got := br.text(`#start-bulk-why`); !strings.Contains(got, "Nothing to start: a guard refuses all") {
		t.Errorf("refused-only bulk preview says %q", got)
	}
	br.shot("bulk-refused-only")

	// The jobs page: run a job now and watch its progress arrive by polling.
	br.step("jobs", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(`#run-sweep`))
	br.step("run now", chromedp.Click(`#run-sweep`), chromedp.WaitVisible(`#jobs-notice`))
	br.step("progress arrives", chromedp.Poll[chromedp.Void](`document.querySelector("#job-runs") && document.querySelector("#job-runs").textContent.includes("3/10")`, chromedp.WithPollingInterval(100*time.Millisecond)))
	br.shot("jobs-running")
	close(job.gate)
	br.step("run finishes", chromedp.WaitVisible(`#job-runs[data-polling=false]`))
	if got := br.text(`#job-runs`); !strings.Contains(got, "succeeded") || !strings.Contains(got, "swept=10") {
		t.Errorf("job runs after the run: %q", got)
	}
	br.shot("jobs")

	// Retention and reconciliation pages, for the screenshots (their behaviour is tested in
	// retention_test.go and recon_test.go).
	b.seedReconJob("stripe-daily")
	run := b.seedReconRun("stripe")
	b.seedFinding(run, "CHANNEL_ONLY", "txn:browser", nil, `{"channel_status":"success"}`)
	br.step("retention", chromedp.Navigate(base+"/retention/preview"), chromedp.WaitVisible(`#preview`))
	br.shot("retention")
	br.step("reconcile", chromedp.Navigate(base+"/reconcile"), chromedp.WaitVisible(`#recon-job-stripe-daily`))
	br.shot("reconcile")
	br.step("findings", chromedp.Navigate(base+"/reconcile/findings"), chromedp.WaitVisible(`#finding-groups`))
	br.shot("reconcile-findings")
}
