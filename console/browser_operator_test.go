package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// browseFindByKey: the header's find box at 1400 px — a key that exists once opens its page; a
// key in two tenants gives a "*" operator the chooser.
func browseFindByKey(t *testing.T, br *browser) {
	b := newBundle(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("all", access.RoleViewer, access.AllTenants)
	once := b.seedKey("acme", "payment.charge", "ORDER-ONCE-1", `{"amount":100,"currency":"USD"}`, true)
	b.seedKey("acme", "payment.charge", "ORDER-TWICE-1", `{"amount":200,"currency":"USD"}`, true)
	b.seedKey("globex", "payment.charge", "ORDER-TWICE-1", `{"amount":300,"currency":"EUR"}`, true)

	br.use(t, b)
	br.step("wide viewport", chromedp.EmulateViewport(1400, 900))
	defer br.step("default viewport", chromedp.EmulateViewport(1280, 900))
	find := func(key string, wait string) {
		br.step("find "+key, chromedp.Navigate(br.base+"/"), chromedp.WaitVisible(`header form.find input[name=key]`),
			chromedp.SendKeys(`header form.find input[name=key]`, key), chromedp.Click(`header form.find button[type=submit]`),
			chromedp.WaitVisible(wait))
	}
	br.signIn("olga")
	find("ORDER-ONCE-1", `#bodies`)
	if loc, err := chromedp.Run(br.ctx, chromedp.Location()); err != nil || loc != fmt.Sprintf("%s/keys/%d", br.base, once.ID) {
		t.Errorf("find a key that exists once: at %q (%v), want its page", loc, err)
	}
	br.shot("find-key-opened")
	br.signOut()

	br.signIn("all")
	find("ORDER-TWICE-1", `table.chooser`)
	got := br.text(`table.chooser`)
	if !strings.Contains(got, "acme") || !strings.Contains(got, "globex") || strings.Contains(got, "ORDER-ONCE-1") {
		t.Errorf("chooser: %q, want the acme and the globex key only", got)
	}
	if n, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`document.querySelectorAll('table.chooser tbody tr').length`)); err != nil || n != 2 {
		t.Errorf("chooser rows: %d (%v), want 2", n, err)
	}
	br.shot("find-key-chooser")
	br.signOut()
}

// browseReplayThroughQuarantine: the replay preview of an IDR key shows its amount with the ISO
// exponent (12345 minor units → 123.45 IDR); confirmed with the reclaimer running and nothing
// downstream, the replay holds the key through a short quarantine (its page counts down), then
// sends once.
func browseReplayThroughQuarantine(t *testing.T, br *browser) {
	// The quarantine (3 s) outlasts the time a confirm waits for its replay (ReplayAnswerWait, 1 s
	// here), so the request's page shows the countdown.
	var held *claim.Store
	b := newBundle(t, func(c *Config) {
		st, err := claim.NewStore(c.DB, claim.Config{DigestSecret: testSecret, LeaseTTL: time.Second, Quarantine: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.Claims, held, c.ReplayAnswerWait = st, st, time.Second
	})
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedFailed("acme", "order-idr-1", `{"amount":12345,"currency":"IDR","payee":"Toko Budi"}`, true)
	defer b.runReclaimer(held)() // the reclaimer runs while the browser works

	br.use(t, b)
	br.step("wide viewport", chromedp.EmulateViewport(1400, 900))
	defer br.step("default viewport", chromedp.EmulateViewport(1280, 900))
	br.signIn("olga")
	br.step("preview", chromedp.Navigate(fmt.Sprintf("%s/keys/%d/replay", br.base, k.ID)), chromedp.WaitVisible(`#confirm-replay`))
	if got := br.text(`main`); !strings.Contains(got, "123.45\u00a0IDR") || strings.Contains(got, "12345\u00a0IDR") {
		t.Errorf("IDR preview: %q, want 123.45 IDR for 12345 minor units", got)
	}
	br.step("reason", chromedp.SendKeys(`textarea[name=reason]`, "charge lost in the outage"))
	br.shot("replay-preview-idr")
	br.step("confirm", chromedp.Click(`#confirm-replay`), chromedp.WaitVisible(`#replay-waiting`))
	if got := br.text(`#replay-waiting`); !strings.Contains(got, "This replay holds the key and looks again at") {
		t.Errorf("waiting: %q", got)
	}
	br.shot("replay-quarantine-waiting")
	// The page refreshes itself (htmx, every 2 s) until the outcome arrives.
	br.step("outcome arrives", chromedp.Poll[chromedp.Void](`(() => { const o = document.querySelector('#replay-outcome');
		return !!o && o.textContent.includes('sent:'); })()`,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if got := br.text(`#replay-outcome`); !strings.Contains(got, "sent: downstream created ch_sent_") {
		t.Errorf("outcome %q", got)
	}
	br.shot("replay-quarantine-sent")
	if n := b.fakeOp.executes.Load(); n != 1 || b.key(k.ID).State != claim.StateCompleted {
		t.Errorf("executes %d, state %s; want one execution, completed", n, b.key(k.ID).State)
	}
	if n := b.count(`SELECT count(*) FROM replay_requests WHERE key_id = ?`, k.ID); n != 1 {
		t.Errorf("%d replay requests, want 1 (no second confirmation)", n)
	}
	br.signOut()
}

// browseConfirmations: a finding resolved through its confirmation disclosure, and a key marked
// final through its own, each naming the consequence before the button.
func browseConfirmations(t *testing.T, br *browser) {
	b := newBundle(t)
	b.addOperator("ada", access.RoleAdmin, access.AllTenants)
	b.setChannel("stripe", "acme")
	k := b.seedKey("acme", "payment.charge", "order-mismatch-1", `{"amount":12000,"currency":"IDR"}`, true)
	run := b.seedReconRun("stripe")
	f := b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", k.ID), &k.ID, `{"line": 7, "channel_status": "success",
		"channel_amount_minor": 12345, "channel_currency": "IDR", "local_state": "completed", "local_amount_minor": 12000,
		"currency": "IDR", "difference_minor": 345}`)
	stuck := b.seedFailed("acme", "order-stuck-1", `{"amount":500,"currency":"JPY","payee":"bob"}`, true)

	br.use(t, b)
	br.step("wide viewport", chromedp.EmulateViewport(1400, 900))
	defer br.step("default viewport", chromedp.EmulateViewport(1280, 900))
	br.signIn("ada")

	// Resolve a finding: open the disclosure, read the consequence, choose a reason, confirm.
	id := fmt.Sprint(f)
	br.step("findings", chromedp.Navigate(br.base+"/reconcile/findings?state=open&view=list"), chromedp.WaitVisible(`#close-`+id+`-confirm summary`))
	if n, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`document.querySelector('#resolve-`+id+`').checkVisibility()`)); err != nil || n {
		t.Errorf("the resolve button shows before its confirmation is opened (%v)", err)
	}
	br.step("open resolve", chromedp.Click(`#close-`+id+`-confirm summary`), chromedp.WaitVisible(`#resolve-`+id))
	if got := br.text(`#close-` + id + `-confirm .consequence`); !strings.Contains(got, "Closes finding #"+id+" as resolved") {
		t.Errorf("resolve consequence: %q", got)
	}
	br.step("reason code", chromedp.SetValue(`#close-`+id+`-reason`, "refunded_at_channel"))
	br.shot("findings-resolve-confirm")
	br.step("resolve", chromedp.Click(`#resolve-`+id), chromedp.WaitVisible(`#findings-notice, #findings-error`))
	if got := br.text(`main [role=status], main [role=alert]`); !strings.Contains(got, "Finding resolved.") {
		t.Errorf("after the resolve: %q", got)
	}
	if st := b.findingState(f); st != "resolved" {
		t.Errorf("finding state %q after the confirmed resolve, want resolved", st)
	}
	br.shot("findings-resolved")

	// Mark final: the same pattern on the replay page.
	br.step("replay page", chromedp.Navigate(fmt.Sprintf("%s/keys/%d/replay", br.base, stuck.ID)), chromedp.WaitVisible(`#mark-final-button-confirm summary`))
	br.step("open mark final", chromedp.Click(`#mark-final-button-confirm summary`), chromedp.WaitVisible(`#mark-final-button`))
	if got := br.text(`#mark-final-button-confirm .consequence`); !strings.Contains(got, "This cannot be undone.") {
		t.Errorf("mark-final consequence: %q", got)
	}
	br.step("reason", chromedp.SendKeys(`#mark-final textarea[name=reason]`, "customer cancelled the order"))
	br.shot("mark-final-confirm")
	br.step("mark final", chromedp.Click(`#mark-final-button`), chromedp.WaitVisible(`#bodies`))
	if st := b.key(stuck.ID).State; st != claim.StateFailedFinal {
		t.Errorf("key state %s after the confirmed mark final, want failed_final", st)
	}
	br.shot("mark-final-done")
	br.signOut()
}
