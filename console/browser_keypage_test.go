package console

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// browseKeyPage: a key page at 1400 px with its intent summary (shown without reveal), its
// history as a timeline whose events expand, and the client's recorded replays and 422s.
func browseKeyPage(t *testing.T, br *browser) {
	b := newBundle(t, withSummaryOps)
	b.addOperator("olga", access.RoleOperator, "acme")
	k := b.seedKey("acme", "payment.charge", "order-summary-1",
		`{"amount":1234567,"currency":"IDR","payee":"Toko Budi","merchant_order_no":"MO-2026-0042","card":"4111-SECRET"}`, true)
	rec := claim.NewAnswerRecorder(b.db, claim.AnswerRecorderConfig{})
	for i := 0; i < 3; i++ {
		rec.Record(k.ID, claim.AnswerReplay, 201)
	}
	rec.Record(k.ID, claim.AnswerMismatch, 422)
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	br.use(t, b)
	ctx := br.ctx
	br.step("wide viewport", chromedp.EmulateViewport(1400, 900))
	defer br.step("default viewport", chromedp.EmulateViewport(1280, 900))
	br.signIn("olga")
	br.step("open key", chromedp.Navigate(fmt.Sprintf("%s/keys/%d", br.base, k.ID)), chromedp.WaitVisible(`#intent-summary`))
	summary := br.text(`#intent-summary`)
	for _, want := range []string{"12,345.67\u00a0IDR", "Toko Budi", "MO-2026-0042"} { // IDR: two minor digits, grouped, joined to its code
		if !strings.Contains(summary, want) {
			t.Errorf("intent summary %q: missing %q", summary, want)
		}
	}
	if strings.Contains(br.text(`main`), "4111-SECRET") {
		t.Error("the key page shows an undeclared request field before the reveal")
	}
	if got := br.text(`#answers`); !strings.Contains(got, "replayed from the stored response") || !strings.Contains(got, "(422)") {
		t.Errorf("answers section: %q", got)
	}

	// The timeline: every event closed; opening one shows its detail.
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#history li.event details').length`))
	if err != nil || n < 2 {
		t.Fatalf("timeline events: %d (%v), want claimed and completed at least", n, err)
	}
	br.step("expand last event", chromedp.Click(`#history li.event:last-child summary`),
		chromedp.WaitVisible(`#history li.event:last-child .event-detail`))
	if got := br.text(`#history li.event:last-child .event-detail`); !strings.Contains(got, "Detail") {
		t.Errorf("expanded event: %q", got)
	}
	if got := br.text(`#history li.event:last-child summary`); !strings.Contains(got, " ago") || !strings.Contains(got, " UTC") {
		t.Errorf("event time %q: want an absolute time with its zone and a relative one", got)
	}
	br.shot("key-summary-timeline")
	br.signOut()
}
