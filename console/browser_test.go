package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/browsertest"

	"github.com/idemops/idemops/claim"
)

// TestBrowser drives the console in headless Chromium, in two flows on one browser: the keys
// and admin pages (browseKeys), and replays and the daemon's jobs (browseReplaysAndJobs). With
// $IDEMOPS_SCREENSHOTS set it saves screenshots of the main pages there (see screenshotDir).
func TestBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	defer br.done()
	// One Chromium for both flows: two at once would double the suite's time on a small machine.
	t.Run("keys", func(t *testing.T) { browseKeys(t, br) })
	t.Run("replays and jobs", func(t *testing.T) { browseReplaysAndJobs(t, br) })
	t.Run("key page", func(t *testing.T) { browseKeyPage(t, br) })
	t.Run("find by key", func(t *testing.T) { browseFindByKey(t, br) })
	t.Run("replay through the quarantine", func(t *testing.T) { browseReplayThroughQuarantine(t, br) })
	t.Run("confirmations", func(t *testing.T) { browseConfirmations(t, br) })
}

// browseKeys: sign in, search, open a key, reveal (audited), check downstream, a form without
// its CSRF token refused, a viewer without the reveal button and with a 403 on the POST, the
// admin pages and the theme toggle.
func browseKeys(t *testing.T, br *browser) {
	b := newBundle(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("vic", access.RoleViewer, "acme")
	b.addOperator("ada", access.RoleAdmin, "*")
	var target int64
	for i := 0; i < 12; i++ {
		k := b.seedKey("acme", "payment.charge", fmt.Sprintf("order-%03d", i), fmt.Sprintf(`{"amount":%d,"currency":"USD","card":"4111-SECRET-%d"}`, 1000+i, i), i%4 != 0)
		if i == 5 {
			target = k.ID
		}
	}
	b.seedKey("globex", "payment.charge", "GLOBEX-1", `{"amount":1,"currency":"EUR"}`, true)
	b.exec(`UPDATE idempotency_keys SET needs_attention = true WHERE id = (SELECT min(id) FROM idempotency_keys WHERE state = 'processing')`)

	br.use(t, b)
	ctx, base := br.ctx, br.base
	step, text, shot, signIn, signOut := br.step, br.text, br.shot, br.signIn, br.signOut
	keyURL := fmt.Sprintf("%s/keys/%d", base, target)

	// Sign in, and land on the dashboard.
	signIn("olga")
	if h := text(`h1`); h != "Dashboard" {
		t.Errorf("after sign-in: h1 %q", h)
	}
	shot("dashboard")

	// The Consumers page: the viewer's tenant's consumer and a business key's deliveries.
	for _, m := range []string{"m-1", "m-2"} {
		if _, err := claim.RecordConsumed(context.Background(), b.db, claim.Consumed{Consumer: "fulfillment", Tenant: "acme",
			BusinessKey: "pay_browser_1", MessageID: m}); err != nil {
			t.Fatal(err)
		}
	}
	step("consumers", chromedp.Navigate(base+"/consumers?key=pay_browser_1"), chromedp.WaitVisible(`#deliveries`))
	if got := text(`#consumer-stats`); !strings.Contains(got, "fulfillment") {
		t.Errorf("consumers page: %q", got)
	}
	shot("consumers")

	// Search: filter by state through the form.
	step("search form", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(`select[name=state]`))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.querySelector('select[name=state]').value = 'completed'`)); err != nil {
		t.Fatal(err)
	}
	// Wait for the new page (its form echoes the filter), not for the old page's table.
	step("search", chromedp.Click(`form[action="/keys"] button[type=submit]`),
		chromedp.WaitReady(`select[name=state] option[value=completed][selected]`), chromedp.WaitVisible(`table.keys`))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.Contains(loc, "state=completed") {
		t.Errorf("search URL %q (%v): the filter is not in the shareable URL", loc, err)
	}
	keysBody := text(`main`)
	if strings.Contains(keysBody, "GLOBEX") || !strings.Contains(keysBody, "order-005") || strings.Contains(keysBody, "order-004") {
		t.Errorf("search for completed keys: %q", keysBody)
	}
	shot("keys")

	// Open a key; reveal its bodies (htmx POST with the form's CSRF token).
	step("open key", chromedp.Navigate(keyURL), chromedp.WaitVisible(`#reveal`))
	if strings.Contains(text(`#bodies`), "4111-SECRET") {
		t.Error("the body shows before the reveal")
	}
	shot("key")
	step("reveal", chromedp.Click(`#reveal`), chromedp.WaitVisible(`pre.revealed`))
	if got := text(`#bodies`); !strings.Contains(got, "4111-SECRET-5") {
		t.Errorf("revealed bodies: %q", got)
	}
	shot("key-revealed")
	var audited int64
	b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = 'key.reveal' AND actor = 'operator:olga' AND target = ?`,
		fmt.Sprintf("key:%d", target)).Scan(&audited)
	if audited != 1 {
		t.Errorf("reveal audit rows: %d, want 1", audited)
	}

	// Check downstream (htmx, into #check).
	step("check downstream", chromedp.Click(`#check-downstream`), chromedp.WaitVisible(`#check p`))
	if got := text(`#check`); !strings.Contains(got, "no document") {
		t.Errorf("downstream check: %q", got)
	}

	// A form whose CSRF token was removed is refused.
	step("form without CSRF token", chromedp.Navigate(keyURL), chromedp.WaitVisible(`#check-downstream`))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`(() => { const f = document.querySelector('#check form');
		f.querySelector('input[name=csrf]').remove(); f.submit(); return null; })()`)); err != nil {
		t.Fatal(err)
	}
	step("refusal page", chromedp.WaitVisible(`.error-page`))
	if got := text(`main`); !strings.Contains(got, "form token") {
		t.Errorf("form without CSRF token: %q", got)
	}
	shot("error-csrf")
	signOut()

	// A viewer sees no reveal button, and the POST is refused.
	signIn("vic")
	step("viewer opens key", chromedp.Navigate(keyURL), chromedp.WaitVisible(`#bodies`))
	if got := text(`main`); strings.Contains(got, "Reveal request") || strings.Contains(got, "4111-SECRET") {
		t.Errorf("viewer's key page offers a reveal or shows the body: %q", got)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
		const csrf = document.querySelector('input[name=csrf]').value;
		const r = await fetch('/keys/%d/reveal', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
			body: 'csrf=' + encodeURIComponent(csrf)});
		return r.status; })()`, target), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != 403 {
		t.Errorf("viewer's reveal POST: %d, want 403", status)
	}
	signOut()

	// The admin pages, and the theme toggle.
	signIn("ada")
	step("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(`table.audit`))
	shot("audit")
	step("operators", chromedp.Navigate(base+"/admin/operators"), chromedp.WaitVisible(`table.operators`))
	shot("operators")
	step("dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`header.top`))
	br.openAccount()
	step("toggle theme", chromedp.Click(`#theme-toggle`))
	theme, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.dataset.theme || ""`))
	if err != nil || theme == "" {
		t.Errorf("the theme toggle set no theme (%q, %v)", theme, err)
	}
	shot("dashboard-" + theme)

}

// browser is a headless Chromium session on a test console, failing the test on any CSP
// violation or script error (checked by done).
type browser struct {
	t        *testing.T
	ctx      context.Context // the current walk's: session under its bound
	session  context.Context // the browser's own, unbounded (cancelled at cleanup)
	bound    time.Duration   // how long one walk may take
	endWalk  context.CancelFunc
	base     string
	shots    string // the screenshots' folder; "" takes none (screenshotDir)
	mu       sync.Mutex
	problems []string
}

// newBrowser starts Chromium; screenshots go to screenshotDir, if anywhere. use points it at a
// test's console.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	return newBrowserFor(t, 120*time.Second)
}

// newBrowserFor is newBrowser with each walk (each use, and what runs before the first) bounded
// by timeout. A bound on the whole session failed a loaded machine's last walk for the time the
// walks before it took (TestBrowser's six walks under one 120 s bound).
func newBrowserFor(t *testing.T, timeout time.Duration) *browser {
	t.Helper()
	path := browsertest.Chromium(t)
	browsertest.Slot(t)
	br := &browser{t: t, shots: screenshotDir(t)}
	opts := browsertest.Options(path, t.TempDir(), 1280, 900)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	// The first action starts the browser; it must not run under the timeout (that would stop
	// the browser when the timeout fires).
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	br.session, br.bound = bctx, timeout
	br.bounded()
	t.Cleanup(func() { br.endWalk() })

	// Any CSP violation or script error is a failure: the pages must work under the policy.
	if _, err := chromedp.Call(br.ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	// The listener lives as long as the session, not one walk's bound.
	if err := chromedp.Listen(bctx, func(ev any) {
		br.mu.Lock()
		defer br.mu.Unlock()
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError && !strings.Contains(e.Entry.Text, "403") && !strings.Contains(e.Entry.Text, "409") {
				br.problems = append(br.problems, e.Entry.Text)
			}
		case *runtime.EventExceptionThrown:
			br.problems = append(br.problems, e.ExceptionDetails.Text)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return br
}

// use points the browser at b's console for test t (a subtest: its failures are its own).
func (br *browser) use(t *testing.T, b *bundle) {
	br.t, br.base = t, b.ts.URL
	br.bounded()
}

// bounded gives the walk that starts now its own bound; the walk before it ends here (what
// runs between two walks stays under the earlier one's bound), the last with the session.
func (br *browser) bounded() {
	if br.endWalk != nil {
		br.endWalk()
	}
	br.ctx, br.endWalk = context.WithTimeout(br.session, br.bound)
}

func (br *browser) step(what string, steps ...chromedp.Action[chromedp.Void]) {
	br.t.Helper()
	if err := chromedp.Do(br.ctx, steps...); err != nil {
		br.t.Fatalf("browser: %s: %v", what, err)
	}
}

// submit clicks sel, a button that submits its form, and waits for the page the submission loads
// (the browser's navigation event): a query right after a bare click may meet the old page's
// nodes as they go ("Could not find node with given id").
func (br *browser) submit(what, sel string) {
	br.t.Helper()
	if _, err := chromedp.RunResponse(br.ctx, chromedp.Click(sel)); err != nil {
		br.t.Fatalf("browser: %s: %v", what, err)
	}
}

func (br *browser) text(sel string) string {
	br.t.Helper()
	s, err := chromedp.Run(br.ctx, chromedp.Text(sel))
	if err != nil {
		br.t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return s
}

// shot saves a full-page screenshot as name.png when screenshots are asked for. A screenshot
// checks nothing: it is for a reviewer's eyes, so `make test` takes none.
func (br *browser) shot(name string) {
	br.t.Helper()
	if br.shots == "" {
		return
	}
	buf, err := chromedp.Run(br.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		br.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(br.shots, name+".png"), buf, 0o644); err != nil {
		br.t.Fatal(err)
	}
}

func (br *browser) signIn(name string) {
	br.t.Helper()
	br.step("sign in as "+name,
		chromedp.Navigate(br.base+"/login"),
		chromedp.WaitVisible(`input[name=name]`),
		chromedp.SendKeys(`input[name=name]`, name),
		chromedp.SendKeys(`input[name=password]`, "correct horse battery"),
		chromedp.Click(`form button[type=submit]`),
		chromedp.WaitVisible(`header.top`))
}

func (br *browser) signOut() {
	br.t.Helper()
	br.openAccount()
	br.step("sign out", chromedp.Click(`form[action="/logout"] button`), chromedp.WaitVisible(`input[name=name]`))
}

// openAccount opens the header's account menu (zone, theme, sign out), unfolding the header
// first where it is folded behind the menu button.
func (br *browser) openAccount() {
	br.t.Helper()
	folded, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`getComputedStyle(document.querySelector('.top .tools')).display === 'none'`))
	if err != nil {
		br.t.Fatalf("browser: header: %v", err)
	}
	if folded {
		br.step("open the menu", chromedp.Click(`label.nav-toggle-label`), chromedp.WaitVisible(`#account > summary`))
	}
	if _, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`document.getElementById('account').open = true`)); err != nil {
		br.t.Fatalf("browser: open the account menu: %v", err)
	}
	br.step("account menu", chromedp.WaitVisible(`form[action="/logout"] button`))
}

// screenshotDir is the folder the browser tests save their screenshots to: $IDEMOPS_SCREENSHOTS
// (a relative path is taken from the repository root; `make screenshots` sets it to
// screenshots/, git-ignored), or "" when it is not set — then they take none. A full-page
// screenshot is the costliest step of a page check and asserts nothing.
func screenshotDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("IDEMOPS_SCREENSHOTS")
	if dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir) // the test runs in console/
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// done fails the test on any browser error seen.
func (br *browser) done() {
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.problems) > 0 {
		br.t.Errorf("browser errors (CSP violations or script errors): %q", br.problems)
	}
}
