package console

import (
	"slices"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
)

// TestBrowser_CellsJobsShowEachCellsDaemon walks the jobs page of a console over two cells, as an
// operator of every tenant, in English and in Chinese: one row per cell's daemon, each with its
// own leader's id, and the control cell marked on cell a's row only. Screenshots
// (screenshotDir): jobs-cells-<lang>.png.
func TestBrowser_CellsJobsShowEachCellsDaemon(t *testing.T) {
	b := setupCells(t) // in parallel with the other tests, as every cells test
	br := newBrowser(t)
	defer br.done()
	if _, err := chromedp.Call(br.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	b.addOperator("otto", access.RoleOperator, "*")
	leaders := map[string]string{}
	leaders["a"], leaders["b"] = b.electLeaderInEachCell()
	br.use(t, b.bundle)
	br.signIn("otto")
	for _, lang := range []struct{ code, heading, control string }{
		{"en", "Daemons by cell", "control"},
		{"zh-CN", "各单元的守护进程", "控制单元"},
	} {
		if _, err := chromedp.Call(br.ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Accept-Language": lang.code}}); err != nil {
			t.Fatal(err)
		}
		br.step(lang.code+" jobs", chromedp.Navigate(br.base+"/jobs"), chromedp.WaitVisible(`table.cell-daemons`))
		// The rows as shown, a hidden one marked: a row missing fails here, not on a wait's bound.
		rows, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.cell-daemons tbody tr')].map(r =>
			r.id + (r.checkVisibility() ? '' : ' (hidden)'))`))
		if err != nil || !slices.Equal(rows, []string{"cell-daemon-a", "cell-daemon-b"}) {
			t.Fatalf("%s: the cells' daemon rows %q (%v), want cell a's and cell b's, shown", lang.code, rows, err)
		}
		if got := br.text(`#cell-daemons h2`); got != lang.heading {
			t.Errorf("%s: the cells' daemons heading %q, want %q", lang.code, got, lang.heading)
		}
		for cell, leader := range leaders {
			if got := br.text(`#cell-daemon-` + cell + ` td.mono`); got != leader {
				t.Errorf("%s: cell %s's row shows leader %q, want %q", lang.code, cell, got, leader)
			}
		}
		// The control badge sits in the first column, beside the cell's name.
		marks, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`['a', 'b'].map(c =>
			[...document.querySelectorAll('#cell-daemon-' + c + ' td:first-child .badge')].map(e => e.innerText).join(' '))`))
		if err != nil || len(marks) != 2 || marks[0] != lang.control || marks[1] != "" {
			t.Errorf("%s: control marks %q (%v), want %q on cell a's row only", lang.code, marks, err, lang.control)
		}
		br.shot("jobs-cells-" + lang.code)
	}
}
