// Package browsertest starts headless Chromium the one way these machines allow, for the
// browser tests of every package (the console's pages, the chaos report page).
package browsertest

import (
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Chromium finds Debian's chromium. Without it the test skips locally and fails under CI=true
// (.ci/run installs it).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run `make prereqs` (apt-get install chromium)")
	return ""
}

// slots holds one token per headless Chromium a test binary runs at once: two, as many as the
// 2-core machine runs well side by side (a browser walk is CPU-bound), however many tests
// -parallel lets run at once around them.
var slots = make(chan struct{}, 2)

// Slot waits for one of the test binary's browser slots and holds it until t ends: call it
// before starting Chromium.
func Slot(t testing.TB) {
	t.Helper()
	slots <- struct{}{}
	t.Cleanup(func() { <-slots })
}

// Options are the allocator options for a headless Chromium at path with its own profile in
// dir and a window of width × height: as root it needs --no-sandbox, and the network is closed,
// so everything that would phone home is off.
func Options(path, dir string, width, height int) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(dir), chromedp.WindowSize(width, height),
	}
}
