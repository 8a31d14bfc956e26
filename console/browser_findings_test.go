package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
)

// TestBrowser_FindingsAFinanceTeamCanWork walks the findings page as a finance operator would,
// in English and in Chinese: the page opens grouped and a group opens in place onto its rows; a
// bulk ignore of every open finding is previewed, started and watched to done (the daemon's
// job); the export downloads; a closed finding is reopened; a refused resolve comes back with
// the note as typed and the reason's error. Screenshots (screenshotDir): findings-*-<lang>.png.
func TestBrowser_FindingsAFinanceTeamCanWork(t *testing.T) {
	t.Parallel()
	br := newBrowserFor(t, 150*time.Second)
	defer func() { br.t = t; br.done() }()
	if _, err := chromedp.Call(br.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	for _, lang := range []struct {
		code                          string
		done, bulkWord, reopened, why string
	}{
		{"en", "done", "Bulk action on findings", "Finding reopened.", "choose a reason"},
		{"zh-CN", "已完成", "批量处理差异", "差异已重新打开。", "请选择原因"},
	} {
		t.Run(lang.code, func(t *testing.T) {
			browseFindings(t, br, lang.code, lang.done, lang.bulkWord, lang.reopened, lang.why)
		})
	}
}

func browseFindings(t *testing.T, br *browser, lang, doneWord, bulkWord, reopenedWord, why string) {
	if _, err := chromedp.Call(br.ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Accept-Language": lang}}); err != nil {
		t.Fatal(err)
	}
	b := newBundle(t)
	b.addOperator("fay", access.RoleOperator, "acme")
	b.setChannel("stripe", "acme")
	run := b.seedReconRun("stripe")
	ids := b.seedOrderFindings(run, "web", 4)
	b.runJobs()
	br.use(t, b)
	br.step("wide viewport", chromedp.EmulateViewport(1400, 900))
	br.signIn("fay")

	// Grouped: one group of four; it opens in place onto its rows.
	br.step("grouped", chromedp.Navigate(br.base+"/reconcile/findings"), chromedp.WaitVisible(`#finding-groups`))
	if got := br.text(`#group-1 .group-count`); !strings.Contains(got, "4") {
		t.Errorf("%s: group count %q", lang, got)
	}
	br.step("open group", chromedp.Click(`#group-1 summary`), chromedp.WaitVisible(`#group-1-rows table.findings`))
	if got := br.text(`#group-1-rows`); !strings.Contains(got, "ORD-web-3") || !strings.Contains(got, "10.03") {
		t.Errorf("%s: the group's rows: %q", lang, got)
	}
	br.shot("findings-grouped-" + lang)

	// Export: the page's CSV link downloads the filter's findings (fetched in the page, with
	// its session).
	csv, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](
		`fetch(document.querySelector('#export-csv').href).then(r => r.ok ? r.text() : 'status ' + r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || strings.Count(csv, "ORD-web-") != 4 {
		t.Errorf("%s: export: %v %q", lang, err, truncate(csv, 200))
	}

	// A refused resolve (no reason: the select's own check is off, as in a browser without
	// it) comes back with the form open, the note as typed and why.
	id := fmt.Sprint(ids[0])
	br.step("list", chromedp.Navigate(br.base+"/reconcile/findings?state=open&view=list"), chromedp.WaitVisible(`#close-`+id+`-confirm summary`))
	br.step("open close", chromedp.Click(`#close-`+id+`-confirm summary`), chromedp.WaitVisible(`#resolve-`+id),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#close-`+id+`-reason').removeAttribute('required')`),
		chromedp.SendKeys(`#close-`+id+`-confirm input[name=note]`, "客户来电 call back"),
		chromedp.Click(`#resolve-`+id), chromedp.WaitVisible(`#close-`+id+`-error`))
	note, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`document.querySelector('#close-`+id+`-confirm input[name=note]').value`))
	if err != nil || note != "客户来电 call back" {
		t.Errorf("%s: the note after the refusal: %q (%v)", lang, note, err)
	}
	if got := br.text(`#close-` + id + `-error`); !strings.Contains(got, why) {
		t.Errorf("%s: the refusal says %q, want %q", lang, got, why)
	}
	br.shot("findings-refused-keeps-note-" + lang)
	br.forget("the server responded with a status of 400") // the refused form's page, as it should be

	// Bulk: tick the page, take every matching finding, preview, choose, start, watch it finish.
	br.step("list again", chromedp.Navigate(br.base+"/reconcile/findings?state=open&view=list"), chromedp.WaitVisible(`#select-page`),
		chromedp.Click(`#select-page`), chromedp.WaitVisible(`#select-all-matching`), chromedp.Click(`#select-all-matching`),
		chromedp.WaitVisible(`#bulk-start`))
	if got := br.text(`h1`); got != bulkWord {
		t.Errorf("%s: preview heading %q", lang, got)
	}
	if got := br.text(`#bulk-count`); !strings.Contains(got, "4") {
		t.Errorf("%s: preview count %q", lang, got)
	}
	if n := b.count(`SELECT count(*) FROM finding_bulk_runs`); n != 0 {
		t.Errorf("%s: the preview stored %d runs", lang, n)
	}
	br.step("choose", chromedp.Click(`#bulk-action-ignore`), chromedp.SetValue(`#bulk-reason`, "test_transaction"),
		chromedp.SendKeys(`#bulk-note`, "browser orders"))
	// Each action's radio sits at the start of its words, not stretched across a line of its own.
	beside, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('#bulk-start input[name=action]')].every(i => {
		const r = i.getBoundingClientRect(), l = i.parentElement.getBoundingClientRect();
		return r.width < 40 && r.right < l.left + 60 && r.top < l.top + 20; })`))
	if err != nil || !beside {
		t.Errorf("%s: the action radios are not beside their words (%v)", lang, err)
	}
	br.shot("findings-bulk-preview-" + lang)
	br.step("start", chromedp.Click(`#bulk-start-button`), chromedp.WaitVisible(`#bulk-progress[data-polling=false]`))
	if got := br.text(`#bulk-state`); got != doneWord {
		t.Errorf("%s: bulk state %q, want %q", lang, got, doneWord)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE state = 'ignored'`); n != 4 {
		t.Errorf("%s: %d ignored, want 4", lang, n)
	}
	br.shot("findings-bulk-done-" + lang)

	// Reopen one of them.
	id = fmt.Sprint(ids[1])
	br.step("ignored", chromedp.Navigate(br.base+"/reconcile/findings?state=ignored&view=list"), chromedp.WaitVisible(`#reopen-`+id+`-confirm summary`),
		chromedp.Click(`#reopen-`+id+`-confirm summary`), chromedp.WaitVisible(`#reopen-`+id),
		chromedp.SetValue(`#reopen-`+id+`-reason`, "closed_in_error"), chromedp.Click(`#reopen-`+id), chromedp.WaitVisible(`#findings-notice`))
	if got := br.text(`#findings-notice`); got != reopenedWord {
		t.Errorf("%s: after reopen %q", lang, got)
	}
	if st := b.findingState(ids[1]); st != "open" {
		t.Errorf("%s: reopened finding is %s", lang, st)
	}
	br.shot("findings-reopened-" + lang)
	br.step("default viewport", chromedp.EmulateViewport(1280, 900))
	br.signOut()
}

// forget drops the browser errors seen so far that contain text: an answer the test asked for.
func (br *browser) forget(text string) {
	br.mu.Lock()
	defer br.mu.Unlock()
	kept := br.problems[:0]
	for _, p := range br.problems {
		if !strings.Contains(p, text) {
			kept = append(kept, p)
		}
	}
	br.problems = kept
}
