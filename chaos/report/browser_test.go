package report

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/idemops/idemops/internal/testinfra/browsertest"
)

// TestBrowser_ReportPageRendersFromAFile opens a five-minute run's report.html from disk in
// headless Chromium: the charts render with a size, every line has one, each chart carries one
// marker per fault, nothing outside the file is requested and the policy is never violated.
// The page is saved as screenshots/chaos-report.png at the repository root (git-ignored).
func TestBrowser_ReportPageRendersFromAFile(t *testing.T) {
	t.Parallel()
	path := browsertest.Chromium(t)
	dir := t.TempDir()
	r := synthetic(1, 300, 24)
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	page := "file://" + filepath.Join(dir, "report.html")

	opts := browsertest.Options(path, t.TempDir(), 1100, 900)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser, outside the timeout
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 20*time.Second)
	defer cancel()

	var mu sync.Mutex
	var problems, requests []string
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				problems = append(problems, e.Entry.Text)
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, e.ExceptionDetails.Text)
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		}
	}); err != nil {
		t.Fatal(err)
	}

	// WaitReady, not WaitVisible: an svg has no offset box, which is what WaitVisible looks at.
	if err := chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitReady(`svg.chart`)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	type box struct {
		ID            string
		Width, Height float64
		Lines         int     // polylines and dots drawn
		MinLineWidth  float64 // the narrowest line's drawn width
		Markers       int
	}
	boxes, err := chromedp.Run(ctx, chromedp.Evaluate[[]box](`Array.from(document.querySelectorAll('svg.chart')).map(s => {
		const b = s.getBoundingClientRect();
		const lines = Array.from(s.querySelectorAll('.series polyline, .series circle'));
		return {ID: s.id, Width: b.width, Height: b.height, Lines: lines.length,
			MinLineWidth: lines.length ? Math.min(...lines.map(l => l.getBoundingClientRect().width)) : 0,
			Markers: s.querySelectorAll('.fault-marker line').length};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if len(boxes) != 3 {
		t.Fatalf("%d charts rendered, want 3", len(boxes))
	}
	for _, b := range boxes {
		if b.Width < 300 || b.Height < 50 {
			t.Errorf("%s renders %vx%v", b.ID, b.Width, b.Height)
		}
		if b.Lines == 0 || b.MinLineWidth < b.Width/2 {
			t.Errorf("%s: %d lines, the narrowest %v wide (chart %v)", b.ID, b.Lines, b.MinLineWidth, b.Width)
		}
		if b.Markers != len(r.Faults) {
			t.Errorf("%s: %d fault markers rendered, want %d", b.ID, b.Markers, len(r.Faults))
		}
	}
	headline, err := chromedp.Run(ctx, chromedp.Text(`h1`))
	if err != nil || strings.TrimSpace(headline) != "FAILED" {
		t.Errorf("headline %q (%v), want FAILED", headline, err)
	}

	shots := filepath.Join("..", "..", "..", "screenshots")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(shots, "chaos-report.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("browser errors (policy violations or script errors): %q", problems)
	}
	if !slices.Contains(requests, page) {
		t.Errorf("the page's own request was not seen (requests %q): the check below would prove nothing", requests)
	}
	for _, u := range requests {
		if u != page {
			t.Errorf("the page requested %s", u)
		}
	}
}
