//go:build polishshots

package console

// Issue #33's closing evidence, not part of `make test` (build tag polishshots):
//
//	go run ./cmd/withpg -- go test -tags polishshots -count=1 -run 'TestPolish' -v ./console/
//
// TestPolishScreenshots writes screenshots of the pages #33 changed, at 1400 and 390 px, in
// English and Chinese, to $POLISH_SHOTS (default ../screenshots): polish-<page>-<lang>-<width>.png.
// TestPolishLiveCost measures each live region's cost per refresh: statements sent to the
// database and wall time, uncached, and the dashboard's cost with its share.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
)

// polishData seeds what the changed pages show: keys in several currencies and states, one
// needing attention, a replay request, a bulk replay, findings of several kinds, the daemon.
func polishData(t *testing.T, b *bundle) (keyID, replayID int64, bulkPath string) {
	t.Helper()
	b.addOperator("ada", access.RoleAdmin, "*")
	b.addOperator("olga", access.RoleOperator, "acme")
	b.exec(`UPDATE operators SET time_zone = 'Asia/Shanghai' WHERE name = 'ada'`)
	amounts := []string{`"amount":5000000,"currency":"KRW"`, `"amount":123456,"currency":"CNY"`, `"amount":1999,"currency":"USD"`,
		`"amount":250000,"currency":"EUR"`}
	for i := 0; i < 8; i++ {
		k := b.seedKey("acme", "payment.charge", fmt.Sprintf("order-2026-12-04-%04d", i),
			fmt.Sprintf(`{%s,"payee":"merchant-%d","merchant_order_no":"o-%d"}`, amounts[i%len(amounts)], i, i), i%3 != 0)
		if i == 1 {
			keyID = k.ID
		}
	}
	b.seedKey("globex", "payment.charge", "gx-1", `{"amount":100,"currency":"USD"}`, true)
	b.exec(`UPDATE idempotency_keys SET needs_attention = true WHERE id = (SELECT min(id) FROM idempotency_keys WHERE state = 'processing')`)
	found := b.seedFailed("acme", "order-found", `{"amount":1234,"currency":"CNY","payee":"alice"}`, true)
	b.fakeOp.has(found, "ch_found_1")
	for i := 0; i < 3; i++ {
		b.seedFailed("acme", fmt.Sprintf("order-bulk-%d", i), fmt.Sprintf(`{"amount":%d,"currency":"EUR","payee":"carol"}`, 100+i), true)
	}
	b.startDaemon()

	c := b.signIn("olga")
	_, token := c.previewToken(found.ID)
	got := c.post(fmt.Sprintf("/keys/%d/replay", found.ID), url.Values{"token": {token}, "reason": {"customer says it was charged"}}, true)
	if got.Status != 303 {
		t.Fatalf("replay: %d %s", got.Status, truncate(got.Body, 300))
	}
	fmt.Sscanf(got.Location, "/replays/%d", &replayID)
	page := c.post("/replays/bulk", url.Values{"tenant": {"acme"}, "state": {"failed_retryable"}, "scope": {"all"}}, true)
	if page.Status != 200 {
		t.Fatalf("bulk preview: %d", page.Status)
	}
	form := bulkStartForm(t, page.Body)
	form.Set("reason", "channel outage 10:00-10:20")
	if got := c.post("/replays/bulk/start", form, true); got.Status == 303 {
		bulkPath = got.Location
	} else {
		t.Fatalf("bulk start: %d %s", got.Status, truncate(got.Body, 300))
	}

	b.setChannel("stripe", "acme")
	run := b.seedReconRun("stripe")
	b.seedOrderFindings(run, "ORD", 4)
	k := keyID
	b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", k), &k,
		`{"line":3,"channel_status":"success","channel_amount_minor":50000,"channel_currency":"CNY","local_state":"completed","local_amount_minor":49900,"currency":"CNY"}`)
	b.seedFinding(run, "CHANNEL_ONLY", "txn:4200001234", nil, `{"line":5,"channel_status":"success","channel_amount_minor":1234,"channel_currency":"USD"}`)
	b.seedFinding(run, "LOCAL_ONLY", fmt.Sprintf("key:%d", k), &k, `{"local_state":"completed","local_amount_minor":1999,"local_currency":"USD"}`)
	return keyID, replayID, bulkPath
}

func TestPolishScreenshots(t *testing.T) {
	dir := os.Getenv("POLISH_SHOTS")
	if dir == "" {
		dir = filepath.Join("..", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	br := newBrowserFor(t, 10*time.Minute)
	defer br.done()
	b := newBundle(t)
	keyID, replayID, _ := polishData(t, b)
	br.use(t, b)
	pages := []struct{ name, path string }{
		{"dashboard", "/"}, {"keys", "/keys"}, {"key", fmt.Sprintf("/keys/%d", keyID)}, {"replays", "/replays"},
		{"replay", fmt.Sprintf("/replays/%d", replayID)}, {"audit", "/audit"}, {"findings", "/reconcile/findings"},
		{"findings-list", "/reconcile/findings?view=list&state=open"}, {"jobs", "/jobs"},
	}
	br.signIn("ada")
	for _, lang := range []string{"en", "zh-CN"} {
		if _, err := chromedp.Call(br.ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Accept-Language": lang}}); err != nil {
			t.Fatal(err)
		}
		for _, width := range []int64{1400, 390} {
			if width < 640 {
				br.step("phone", chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait))
			} else {
				br.step("desktop", chromedp.EmulateViewport(width, 900))
			}
			for _, p := range pages {
				br.step(p.name, chromedp.Navigate(br.base+p.path), chromedp.WaitVisible(`header.top`))
				buf, err := chromedp.Run(br.ctx, chromedp.FullScreenshot(100))
				if err != nil {
					t.Fatalf("screenshot %s: %v", p.name, err)
				}
				name := fmt.Sprintf("polish-%s-%s-%d.png", p.name, lang, width)
				if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", name)
			}
		}
	}
}

// TestPolishLiveCost: each live region polled 20 times as htmx polls it, uncached (the
// dashboard's share switched off), then the dashboard with its share: statements per refresh
// (the session's own reads included) and milliseconds per refresh.
func TestPolishLiveCost(t *testing.T) {
	b := newBundle(t)
	keyID, replayID, bulkPath := polishData(t, b)
	// The key page's state polls only while the key is not settled.
	var open int64
	if err := b.db.Raw(`SELECT min(id) FROM idempotency_keys WHERE state = 'processing'`).Scan(&open).Error; err != nil {
		t.Fatal(err)
	}
	_ = keyID
	var run int64
	if err := b.db.Raw(`SELECT max(id) FROM recon_runs`).Scan(&run).Error; err != nil {
		t.Fatal(err)
	}
	// The daemon may share the console's database handle: stopped, so only the polls' statements count.
	if err := b.daemon.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := b.signIn("ada")
	counter := countStatements(t, b.srv.db) // the console's own handle
	olga := b.signIn("olga")
	measure := func(name, path string) {
		const n = 20
		c := c
		if strings.HasPrefix(path, "/replays/bulk/") {
			c = olga // a bulk run is its operator's
		}
		if got := c.poll(path); got.Status != 200 {
			t.Fatalf("%s: %d", name, got.Status)
		}
		counter.take()
		var times []time.Duration
		all := 0
		for i := 0; i < n; i++ {
			start := time.Now()
			if got := c.poll(path); got.Status != 200 {
				t.Fatalf("%s: %d", name, got.Status)
			}
			times = append(times, time.Since(start))
			a, _ := counter.take()
			all += a
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		var sum time.Duration
		for _, d := range times {
			sum += d
		}
		t.Logf("LIVECOST %-34s %5.1f statements/refresh, mean %6.2f ms, median %6.2f ms, max %6.2f ms",
			name+" "+path, float64(all)/n, ms(sum/n), ms(times[n/2]), ms(times[n-1]))
	}
	b.srv.live = newLiveShare(0)
	measure("key state (the key's row only: the session's share)", fmt.Sprintf("/keys/%d?part=state", open))
	measure("dashboard, uncached", "/")
	b.srv.live = newLiveShare(liveTTL)
	measure("dashboard, shared (2 s)", "/")
	measure("key state", fmt.Sprintf("/keys/%d?part=state", open))
	measure("replay request", fmt.Sprintf("/replays/%d", replayID))
	measure("bulk replay progress", bulkPath+"/progress")
	measure("job runs", "/jobs/runs")
	measure("recon run", fmt.Sprintf("/reconcile/runs/%d", run))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
