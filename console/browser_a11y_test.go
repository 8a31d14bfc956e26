package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// a11yPage is one console page the accessibility loop opens: by GET, or by a form POST from the
// page before (POST pages: the find result, the bulk preview).
type a11yPage struct {
	name, path string
	form       url.Values // non-nil: POST these fields (plus the session's CSRF token) to path
	signedOut  bool
}

// axeViolation is one axe rule that failed on a page.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Nodes   int      `json:"nodes"`
	Targets []string `json:"targets"`
	Summary string   `json:"summary,omitempty"`
}

// a11yResult is one page in one language and theme, as written to axe-results.json.
type a11yResult struct {
	Page       string         `json:"page"`
	Lang       string         `json:"lang"`      // the Accept-Language sent
	HTMLLang   string         `json:"html_lang"` // what the page declared
	Theme      string         `json:"theme"`
	ByImpact   map[string]int `json:"by_impact"`
	Violations []axeViolation `json:"violations"`
}

// TestBrowserAccessibility opens every console page (seeded so its tables are not empty) in
// both languages (Accept-Language zh-CN and en) and runs axe-core on it in the light and the
// dark theme (prefers-color-scheme), failing on any serious or critical violation. Each page is
// also shot at 1400 px, at 1024 px (a small laptop: the header must be one bar with every part
// on screen and no nav label on two lines) and at 390 px (a phone), where the page must not
// scroll sideways; at 1024 and 390 px axe runs again the rules a width can change.
// With $IDEMOPS_SCREENSHOTS set (screenshotDir): screenshots <page>-<lang>-<width>.png and the
// per-page results, axe-results.json, in that folder. One Chromium and one console for the loop.
func TestBrowserAccessibility(t *testing.T) {
	t.Parallel() // its own browser and console: it runs beside the other browser walks
	axe := axeSource(t)
	br := newBrowserFor(t, 8*time.Minute) // a bound, not the expected time (see the log line)
	defer br.done()
	// The error pages answer 4xx on purpose: their console lines are not script errors.
	defer func() {
		br.mu.Lock()
		kept := br.problems[:0]
		for _, p := range br.problems {
			if !strings.Contains(p, "status of 404") && !strings.Contains(p, "status of 400") {
				kept = append(kept, p)
			}
		}
		br.problems = kept
		br.mu.Unlock()
	}()
	start := time.Now()
	var results []a11yResult
	defer func() {
		t.Logf("accessibility loop: %d page views (%d axe runs), %s: navigation %s, axe injection %s, axe %s, keyboard %s, widths and screenshots %s",
			len(results)/2, len(results), time.Since(start).Round(100*time.Millisecond), a11yTimes.nav.Round(100*time.Millisecond),
			a11yTimes.inject.Round(100*time.Millisecond), a11yTimes.axe.Round(100*time.Millisecond), a11yTimes.keys.Round(100*time.Millisecond),
			a11yTimes.shots.Round(100*time.Millisecond))
	}()
	b, pages := seedEveryPage(t)
	br.use(t, b)
	ctx := br.ctx
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	br.signIn("ada")

	const wide, phone = 1400, 390
	// Until the zh-CN catalogs land both render English; the loop is the same either way.
	a11yLangs := []string{"en", "zh-CN"}
	for _, lang := range a11yLangs {
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Accept-Language": lang}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			results = append(results, a11yVisit(t, br, axe, p, lang, wide, phone)...)
		}
	}
	// Signed out: the sign-in page, in both languages.
	br.step("wide again", chromedp.EmulateViewport(wide, 900))
	br.signOut()
	for _, lang := range a11yLangs {
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Accept-Language": lang}}); err != nil {
			t.Fatal(err)
		}
		results = append(results, a11yVisit(t, br, axe, a11yPage{name: "login", path: "/login", signedOut: true}, lang, wide, phone)...)
	}
	if br.shots != "" {
		out, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(filepath.Join(br.shots, "axe-results.json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var failing []string
	for _, r := range results {
		for _, v := range r.Violations {
			if v.Impact == "serious" || v.Impact == "critical" {
				failing = append(failing, fmt.Sprintf("%s [%s, %s]: %s %s (%d: %s) %s", r.Page, r.Lang, r.Theme, v.Impact, v.ID,
					v.Nodes, strings.Join(v.Targets, " | "), v.Summary))
			}
		}
	}
	sort.Strings(failing)
	for _, f := range failing {
		t.Error("axe: " + f)
	}
}

// a11yVisit opens p once in lang and checks it: axe in the light and the dark theme, a shot at
// wide, then at phone width the sideways check and a shot.
func a11yVisit(t *testing.T, br *browser, axe string, p a11yPage, lang string, wide, phone int64) []a11yResult {
	t.Helper()
	ctx := br.ctx
	tStart := time.Now()
	br.step(p.name+" viewport", chromedp.EmulateViewport(wide, 900))
	setTheme(t, br, "light")
	if p.form != nil {
		fields, _ := json.Marshal(p.form)
		submit := chromedp.Evaluate[any](fmt.Sprintf(`(() => {
			const f = document.createElement('form'); f.method = 'post'; f.action = %q;
			const fields = %s; fields.csrf = [document.querySelector('input[name=csrf]').value];
			for (const [k, vs] of Object.entries(fields)) for (const v of vs) {
				const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
			document.body.appendChild(f); f.submit(); return null; })()`, p.path, fields))
		// RunResponse waits for the navigation the submit starts to load (the browser's event).
		if _, err := chromedp.RunResponse(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := submit(ctx, t)
			return err
		})); err != nil {
			t.Fatalf("%s: post: %v", p.name, err)
		}
		br.step(p.name+" page", chromedp.WaitReady(`main`))
	} else {
		br.step(p.name, chromedp.Navigate(br.base+p.path), chromedp.WaitReady(`main`))
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, "/login") && !p.signedOut {
		t.Fatalf("%s: landed on the sign-in page (%s)", p.name, loc)
	}
	tNav := time.Now()
	a11yTimes.nav += tNav.Sub(tStart)
	htmlLang, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.lang`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](axe+`;axe.configure({noHtml: true});true`)); err != nil {
		t.Fatalf("inject axe-core: %v", err)
	}
	tInj := time.Now()
	var out []a11yResult
	for _, theme := range []string{"light", "dark"} {
		setTheme(t, br, theme)
		// Every rule in the light theme; in the dark one only what the theme changes (colours).
		// No preload: the rule that would read the stylesheets (css-orientation-lock) is not one
		// this console can break (no orientation media queries), and preloading costs each run.
		opts := `{resultTypes: ['violations'], preload: false}`
		if theme == "dark" {
			opts = `{resultTypes: ['violations'], preload: false, runOnly: {type: 'rule', values: ['color-contrast', 'link-in-text-block', 'non-text-contrast'].filter(id => axe.getRules().some(r => r.ruleId === id))}}`
		}
		vs, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](`axe.run(document, `+opts+`).then(r =>
			r.violations.map(v => ({id: v.id, impact: v.impact || '', help: v.help, nodes: v.nodes.length,
				targets: v.nodes.slice(0, 3).map(n => n.target.join(' ')), summary: (v.nodes[0] && v.nodes[0].failureSummary || '').split('\n').slice(0, 2).join(' ')})))`,
			chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: axe.run: %v", p.name, err)
		}
		r := a11yResult{Page: p.name, Lang: lang, HTMLLang: htmlLang, Theme: theme, ByImpact: map[string]int{}, Violations: vs}
		for _, v := range vs {
			r.ByImpact[v.Impact]++
		}
		out = append(out, r)
	}
	tAxe := time.Now()
	a11yTimes.inject += tInj.Sub(tNav)
	a11yTimes.axe += tAxe.Sub(tInj)
	setTheme(t, br, "light")
	// Keyboard: every visible control is in the tab order, takes focus, and shows it. A Tab
	// first puts the page in keyboard mode, where focus is drawn (:focus-visible).
	br.step(p.name+" tab", chromedp.KeyEvent("\t"))
	bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const desc = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.name ? '[name=' + el.name + ']' : '') +
			' "' + (el.textContent || el.value || '').trim().slice(0, 30) + '"';
		const bad = [], seen = new Set();
		for (const el of document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]')) {
			if (el.disabled || !el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
			if (el.tabIndex < 0) { bad.push('not reachable by Tab: ' + desc(el)); continue; }
			// Focus drawing depends on the kind of control: one of each kind is enough.
			const kind = el.tagName + '.' + el.className + '.' + (el.type || '');
			if (seen.has(kind)) continue;
			seen.add(kind);
			el.focus({preventScroll: true});
			if (document.activeElement !== el) { bad.push('takes no focus: ' + desc(el)); continue; }
			const cs = getComputedStyle(el);
			if (!el.matches(':focus-visible') || cs.outlineStyle === 'none' || parseFloat(cs.outlineWidth) < 1) bad.push('focus not visible: ' + desc(el));
		}
		if (document.activeElement) document.activeElement.blur();
		return bad.slice(0, 5);
	})()`))
	if err != nil {
		t.Fatalf("%s: keyboard check: %v", p.name, err)
	}
	for _, m := range bad {
		t.Errorf("%s [%s]: %s", p.name, lang, m)
	}
	tKeys := time.Now()
	a11yTimes.keys += tKeys.Sub(tAxe)
	a11yShot(t, br, fmt.Sprintf("%s-%s-%d", p.name, lang, wide))

	// A small laptop: 1024 px. The header is one bar (not folded behind the menu button), every
	// part of it on screen, no nav label on two lines; axe again for what the width changes.
	const laptop = 1024
	br.step(p.name+" laptop", chromedp.EmulateViewport(laptop, 800))
	if !p.signedOut {
		header, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
			const bad = [], w = window.innerWidth;
			const tools = document.querySelector('.top .tools');
			if (!tools || getComputedStyle(tools).display === 'none') bad.push('header folded: tools hidden');
			for (const el of document.querySelectorAll('.top > *, .top nav a, #account > summary')) {
				const r = el.getBoundingClientRect();
				if (getComputedStyle(el).display === 'none' || r.width === 0) continue;
				if (r.right > w + 0.5) bad.push((el.id || el.className || el.tagName) + ' ends at ' + Math.round(r.right));
			}
			for (const a of document.querySelectorAll('.top nav a')) {
				const fs = parseFloat(getComputedStyle(a).fontSize);
				if (a.getBoundingClientRect().height > 2.2 * fs) bad.push('nav label on two lines: ' + a.textContent.trim());
			}
			return bad;
		})()`))
		if err != nil {
			t.Fatalf("%s: header check: %v", p.name, err)
		}
		for _, m := range header {
			t.Errorf("%s [%s] at %d px: %s", p.name, lang, laptop, m)
		}
	}
	out = append(out, a11yWidthRules(t, br, p, lang, htmlLang, laptop))
	a11yShot(t, br, fmt.Sprintf("%s-%s-%d", p.name, lang, laptop))

	// A phone: 390 px, touch. The page itself must never scroll sideways.
	br.step(p.name+" phone", chromedp.EmulateViewport(phone, 844, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait))
	out = append(out, a11yWidthRules(t, br, p, lang, htmlLang, phone))
	type dims struct{ ScrollWidth, ViewportWidth float64 }
	d, err := chromedp.Run(ctx, chromedp.Evaluate[dims](`({ScrollWidth: document.documentElement.scrollWidth, ViewportWidth: window.innerWidth})`))
	if err != nil {
		t.Fatal(err)
	}
	// Against the device width too: a mobile browser widens its layout viewport to fit an
	// overflowing page, so innerWidth grows with the fault.
	if d.ScrollWidth > float64(phone) || d.ViewportWidth > float64(phone) {
		t.Errorf("%s [%s]: wider than the %d px phone: scrollWidth %v, viewport %v", p.name, lang, phone, d.ScrollWidth, d.ViewportWidth)
	}
	a11yShot(t, br, fmt.Sprintf("%s-%s-%d", p.name, lang, phone))
	a11yTimes.shots += time.Since(tKeys)
	return out
}

// a11yWidthRules runs the axe rules a viewport's width can change (scrollers, nesting, names and
// contrast of what folds) on the page as it is, in the light theme; the result's theme names the
// width.
func a11yWidthRules(t *testing.T, br *browser, p a11yPage, lang, htmlLang string, width int64) a11yResult {
	t.Helper()
	start := time.Now()
	defer func() { a11yTimes.axe += time.Since(start) }()
	vs, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]axeViolation](`axe.run(document, {resultTypes: ['violations'], preload: false,
		runOnly: {type: 'rule', values: ['scrollable-region-focusable', 'nested-interactive', 'color-contrast', 'label', 'button-name', 'link-name']
			.filter(id => axe.getRules().some(r => r.ruleId === id))}}).then(r =>
		r.violations.map(v => ({id: v.id, impact: v.impact || '', help: v.help, nodes: v.nodes.length,
			targets: v.nodes.slice(0, 3).map(n => n.target.join(' ')), summary: (v.nodes[0] && v.nodes[0].failureSummary || '').split('\n').slice(0, 2).join(' ')})))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s at %d px: axe.run: %v", p.name, width, err)
	}
	r := a11yResult{Page: p.name, Lang: lang, HTMLLang: htmlLang, Theme: fmt.Sprintf("light@%dpx", width), ByImpact: map[string]int{}, Violations: vs}
	for _, v := range vs {
		r.ByImpact[v.Impact]++
	}
	return r
}

// a11yShot saves a full-page PNG like br.shot, encoded for speed (larger files, less time),
// when screenshots are asked for.
func a11yShot(t *testing.T, br *browser, name string) {
	t.Helper()
	if br.shots == "" {
		return
	}
	yes := true
	r, err := chromedp.Call(br.ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng,
		CaptureBeyondViewport: &yes, FromSurface: &yes, OptimizeForSpeed: &yes})
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(br.shots, name+".png"), r.Data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setTheme emulates the system colour scheme, which the console follows until an operator
// picks one with the toggle (none is picked in this browser profile).
func setTheme(t *testing.T, br *browser, theme string) {
	t.Helper()
	if _, err := chromedp.Call(br.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme}}}); err != nil {
		t.Fatal(err)
	}
}

// a11yTimes adds up where the loop's time goes (logged at its end).
var a11yTimes struct{ nav, inject, axe, keys, shots time.Duration }

var lineLink = regexp.MustCompile(`href="/reconcile/runs/(\d+)/line\?n=(\d+)"`)

// seedEveryPage fills one console so that every page has rows to show, and lists the pages.
func seedEveryPage(t *testing.T) (*bundle, []a11yPage) {
	t.Helper()
	b := newBundle(t)
	b.addOperator("ada", access.RoleAdmin, "*")
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("vic", access.RoleViewer, "acme")
	var done, failed int64
	for i := 0; i < 4; i++ {
		k := b.seedKey("acme", "payment.charge", fmt.Sprintf("order-%03d", i), fmt.Sprintf(`{"amount":%d,"currency":"USD"}`, 1000+i), i%2 == 0)
		if i == 0 {
			done = k.ID
		}
	}
	b.exec(`UPDATE idempotency_keys SET needs_attention = true WHERE id = (SELECT min(id) FROM idempotency_keys WHERE state = 'processing')`)
	for i := 0; i < 3; i++ {
		k := b.seedFailed("acme", fmt.Sprintf("order-failed-%d", i), fmt.Sprintf(`{"amount":%d,"currency":"EUR"}`, 200+i), true)
		failed = k.ID
	}
	b.seedFailed("acme", "order-declined", `{"amount":300,"currency":"EUR"}`, false)
	b.seedKey("globex", "payment.charge", "GLOBEX-1", `{"amount":1,"currency":"EUR"}`, true)

	c := b.signIn("ada")
	// A replay request (four eyes: an admin's request waits for a second operator).
	_, token := c.previewToken(failed)
	got := c.post(fmt.Sprintf("/keys/%d/replay", failed), url.Values{"token": {token}, "reason": {"lost in the outage"}}, true)
	if got.Status != 303 && got.Status != 200 {
		t.Fatalf("replay: %d %s", got.Status, truncate(got.Body, 200))
	}
	replayID := b.count(`SELECT max(id) FROM replay_requests`)
	// A bulk replay run.
	got = c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "state": {"failed_retryable"}, "scope": {"all"}}, true)
	if got.Status != 200 {
		t.Fatalf("bulk preview: %d %s", got.Status, truncate(got.Body, 200))
	}
	form := bulkStartForm(t, got.Body)
	form.Set("reason", "channel outage")
	if got = c.post("/replays/bulk/start", form, true); got.Status != 303 {
		t.Fatalf("bulk start: %d %s", got.Status, truncate(got.Body, 200))
	}
	bulkPath := got.Location
	// A reconciliation: a job, and a statement uploaded (a run, its findings and lines).
	b.seedReconJob("stripe-daily")
	b.setChannel("stripe", "acme")
	file, err := os.ReadFile("../reconcile/testdata/stripe/itemized.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.upload("/reconcile/upload", map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}, file); got.Status != 303 {
		t.Fatalf("upload: %d %s", got.Status, truncate(got.Body, 200))
	}
	run := b.count(`SELECT max(id) FROM recon_runs`)
	m := lineLink.FindStringSubmatch(c.get(fmt.Sprintf("/reconcile/findings?run=%d", run)).Body)
	if m == nil {
		t.Fatal("no finding links to a statement line")
	}
	// A job run, finished.
	var jobRun []int64
	if err := b.db.Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, status, deadline_at, finished_at, stats)
		VALUES ('sweep', 'sweep', 'run_now', 'replica-a', 'succeeded', now() + interval '1 hour', now(), '{"swept": 3}') RETURNING id`).Scan(&jobRun).Error; err != nil {
		t.Fatal(err)
	}
	// A retention policy.
	if got := c.post("/retention/policies", url.Values{"operation": {"payment.charge"}, "state": {"completed"},
		"keep_response": {"30d"}, "keep_key": {"90d"}}, true); got.Status >= 400 {
		t.Fatalf("retention policy: %d %s", got.Status, truncate(got.Body, 200))
	}
	// A consumer's deliveries.
	for _, m := range []string{"m-1", "m-2"} {
		if _, err := claim.RecordConsumed(context.Background(), b.db, claim.Consumed{Consumer: "fulfillment", Tenant: "acme",
			BusinessKey: "pay_a11y_1", MessageID: m}); err != nil {
			t.Fatal(err)
		}
	}

	pages := []a11yPage{
		{name: "dashboard", path: "/"},
		{name: "keys", path: "/keys"},
		{name: "key", path: fmt.Sprintf("/keys/%d", done)},
		{name: "key-failed", path: fmt.Sprintf("/keys/%d", failed)},
		{name: "replay-preview", path: fmt.Sprintf("/keys/%d/replay", failed-1)},
		{name: "find", path: "/keys/find", form: url.Values{"key": {"no-such-key"}}},
		{name: "replays", path: "/replays"},
		{name: "replay", path: fmt.Sprintf("/replays/%d", replayID)},
		{name: "bulk-preview", path: "/replays/bulk", form: url.Values{"tenant": {"acme"}, "scope": {"all"}}},
		{name: "bulk", path: bulkPath},
		{name: "consumers", path: "/consumers?key=pay_a11y_1"},
		{name: "jobs", path: "/jobs"},
		{name: "job-run", path: fmt.Sprintf("/jobs/runs/%d", jobRun[0])},
		{name: "reconcile", path: "/reconcile"},
		{name: "recon-job", path: "/reconcile/jobs/stripe-daily"},
		{name: "recon-runs", path: "/reconcile/runs"},
		{name: "recon-run", path: fmt.Sprintf("/reconcile/runs/%d", run)},
		{name: "findings", path: "/reconcile/findings"},
		{name: "findings-list", path: "/reconcile/findings?view=list&state=open"},
		{name: "findings-bulk-preview", path: "/reconcile/findings/bulk", form: url.Values{"scope": {"all"}, "state": {"open"}}},
		{name: "findings-bulk-runs", path: "/reconcile/findings/bulk"},
		{name: "statement-line", path: fmt.Sprintf("/reconcile/runs/%s/line?n=%s", m[1], m[2])},
		{name: "retention", path: "/retention"},
		{name: "retention-preview", path: "/retention/preview"},
		{name: "audit", path: "/audit"},
		{name: "operators", path: "/admin/operators"},
		{name: "error-404", path: "/keys/999999999"},
		{name: "error-400", path: fmt.Sprintf("/reconcile/runs/%d/line?n=abc", run)},
	}
	return b, pages
}
