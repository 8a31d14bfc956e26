package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
)

// TestBrowserPhoneWidth opens the main pages at 390 px with touch (a phone) and checks that the
// page never scrolls sideways (document.documentElement.scrollWidth ≤ the viewport width), that
// the navigation folds into a menu that opens without script, and that controls are at least
// 44 px tall. Screenshots (screenshotDir): phone-*.png.
func TestBrowserPhoneWidth(t *testing.T) {
	t.Parallel() // its own browser and console: it runs beside the other browser walks
	br := newBrowser(t)
	defer br.done()
	b := newBundle(t)
	b.addOperator("ada", access.RoleAdmin, "*")
	var keyID int64
	for i := 0; i < 6; i++ {
		// Long keys and bodies make the widest tables.
		k := b.seedKey("acme-tenant-with-a-long-name", "payment.charge", fmt.Sprintf("order-2024-03-01-customer-%03d-%s", i, strings.Repeat("x", 40)),
			fmt.Sprintf(`{"amount":%d,"currency":"USD"}`, 1000+i), i%2 == 0)
		keyID = k.ID
	}
	b.seedReconJob("daily")
	b.setChannel("stripe", "acme-tenant-with-a-long-name")
	run := b.seedReconRun("stripe")
	b.seedFinding(run, "CHANNEL_ONLY", "txn:"+strings.Repeat("9", 48), nil, `{"channel_status":"success","amount":1234}`)

	br.use(t, b)
	const width = 390
	br.step("phone viewport", chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait))
	br.signIn("ada")

	type dims struct {
		ScrollWidth, ViewportWidth float64
		NavDisplay                 string
		MinControl                 float64
	}
	measure := func() dims {
		t.Helper()
		d, err := chromedp.Run(br.ctx, chromedp.Evaluate[dims](`(() => {
			const nav = document.querySelector('#main-nav');
			let min = 1e9;
			for (const el of document.querySelectorAll('button, a.button, summary.danger, select, input:not([type=hidden]):not([type=checkbox]):not([type=radio]), .nav-toggle-label')) {
				const r = el.getBoundingClientRect();
				if (r.width > 0 && r.height > 0) min = Math.min(min, r.height);
			}
			return {ScrollWidth: document.documentElement.scrollWidth, ViewportWidth: window.innerWidth,
				NavDisplay: nav ? getComputedStyle(nav).display : '', MinControl: min};
		})()`))
		if err != nil {
			t.Fatalf("measure: %v", err)
		}
		return d
	}
	pages := []struct{ name, path string }{
		{"dashboard", "/"}, {"keys", "/keys"}, {"key", fmt.Sprintf("/keys/%d", keyID)}, {"replays", "/replays"},
		{"jobs", "/jobs"}, {"consumers", "/consumers"}, {"reconcile", "/reconcile"}, {"findings", "/reconcile/findings"},
		{"recon-runs", "/reconcile/runs"}, {"retention", "/retention"}, {"audit", "/audit"}, {"operators", "/admin/operators"},
	}
	for _, p := range pages {
		br.step(p.name, chromedp.Navigate(br.base+p.path), chromedp.WaitVisible(`header.top`))
		d := measure()
		// Against the device width, not innerWidth: a mobile browser widens its layout viewport
		// (zooming out) to fit a page that overflows, so innerWidth grows with the fault.
		if d.ScrollWidth > width || d.ViewportWidth > width {
			t.Errorf("%s: the page is wider than the %d px phone: scrollWidth %v, layout viewport %v", p.name, width, d.ScrollWidth, d.ViewportWidth)
		}
		if d.NavDisplay != "none" {
			t.Errorf("%s: the navigation is not folded into the menu (display %q)", p.name, d.NavDisplay)
		}
		if d.MinControl < 44 {
			t.Errorf("%s: a control is %.0f px tall on touch, want ≥ 44", p.name, d.MinControl)
		}
		br.shot("phone-" + p.name)
	}
	// The menu opens by its label, without script, and shows every section and Sign out.
	br.step("open menu", chromedp.Click(`label.nav-toggle-label`), chromedp.WaitVisible(`#main-nav a[href="/admin/operators"]`),
		chromedp.WaitVisible(`#account > summary`))
	if d := measure(); d.ScrollWidth > width || d.NavDisplay == "none" {
		t.Errorf("menu open: %+v", d)
	}
	br.shot("phone-menu")
	// And by keyboard: Space on the (visually hidden) checkbox.
	br.step("menu by keyboard", chromedp.Navigate(br.base+"/keys"), chromedp.WaitVisible(`header.top`),
		chromedp.Focus(`#nav-toggle`), chromedp.KeyEvent(" "), chromedp.WaitVisible(`#main-nav a[href="/retention"]`))
	br.signOut()
	if d := measure(); d.ScrollWidth > width || d.MinControl < 44 {
		t.Errorf("sign-in page: %+v", d)
	}
	br.shot("phone-login")
}
