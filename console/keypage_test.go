package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
)

// summaryOp is fakeOp declaring the non-sensitive fields of its intent, as the demo's payment does.
type summaryOp struct{ *fakeOp }

func (summaryOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency",
		Summary: []string{"amount", "currency", "payee", "merchant_order_no"}}
}

// withSummaryOps registers payment.charge with a declared summary and refund.plain without one.
func withSummaryOps(c *Config) {
	pay := summaryOp{&fakeOp{name: "payment.charge", found: map[string]string{}}}
	plain := &fakeOp{name: "refund.plain", found: map[string]string{}}
	c.Operations = func(name string) (claim.Operation, bool) {
		switch name {
		case pay.name:
			return pay, true
		case plain.name:
			return plain, true
		}
		return nil, false
	}
}

func TestKeyPage_IntentSummaryShowsDeclaredFieldsWithoutReveal(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withSummaryOps)
	b.addOperator("v", RoleViewer, "*")
	c := b.signIn("v")
	intent := `{"amount":12345,"currency":"IDR","payee":"Toko Budi","merchant_order_no":"MO-77","card":"4111-SECRET"}`
	k := b.seedKey("acme", "payment.charge", "sum-1", intent, true)
	page := c.get(fmt.Sprintf("/keys/%d", k.ID))
	if page.Status != 200 {
		t.Fatalf("key page: %d", page.Status)
	}
	// IDR has two minor-unit digits (ISO 4217): 12345 is 123.45, never "12345 IDR".
	mustContain(t, "summary", page.Body, `id="intent-summary"`, "123.45 IDR", "Toko Budi", "MO-77", "merchant order no")
	mustNotContain(t, "summary", page.Body, "4111-SECRET", "12345 IDR")

	// An operation that declares nothing shows no summary, and nothing of its request.
	k2 := b.seedKey("acme", "refund.plain", "sum-2", `{"amount":500,"currency":"JPY","payee":"Hidden Payee"}`, true)
	page = c.get(fmt.Sprintf("/keys/%d", k2.ID))
	mustNotContain(t, "undeclared summary", page.Body, `id="intent-summary"`, "Hidden Payee")
}

func TestKeyPage_HistoryIsATimelineWithExpandableDetail(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.addOperator("v", RoleViewer, "*")
	c := b.signIn("v")
	k := b.seedKey("acme", "payment.charge", "tl-1", `{"amount":100,"currency":"EUR"}`, true)
	body := c.get(fmt.Sprintf("/keys/%d", k.ID)).Body
	evs, err := b.claims.History(context.Background(), k.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 2 {
		t.Fatalf("seeded key has %d events, want claimed and completed", len(evs))
	}
	// One <details> per event, each with its kind, an absolute time with its zone, a relative one
	// and its detail inside.
	if n := strings.Count(body, `<li class="event event-`); n != len(evs) {
		t.Errorf("timeline shows %d events, want %d", n, len(evs))
	}
	if n := strings.Count(body, "<details><summary><strong>"); n != len(evs) {
		t.Errorf("timeline has %d expandable events, want %d", n, len(evs))
	}
	last := evs[len(evs)-1]
	mustContain(t, "timeline", body, `id="history"`, "<strong>"+last.Kind+"</strong>",
		`datetime="`+last.At.UTC().Format(time.RFC3339Nano)+`"`, last.At.UTC().Format("2006-01-02 15:04:05.000Z"), " s ago</span>",
		`<dt>Event</dt><dd class="mono">#`+strconv.FormatInt(last.ID, 10)+`</dd>`)
	var detail bytes.Buffer
	if err := json.Indent(&detail, last.Detail, "", "  "); err != nil || detail.Len() < 3 {
		t.Fatalf("completed event detail %q: want a JSON object with fields", last.Detail)
	}
	mustContain(t, "timeline detail", body, "<pre>"+html.EscapeString(detail.String())+"</pre>")
}
