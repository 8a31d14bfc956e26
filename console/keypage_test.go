package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
)

// TestKeyPage_RequestAndResponseEachUnderItsOwnHeading: the stored bodies are headed Request and
// Response (the response once said "Request" too), in both languages.
func TestKeyPage_RequestAndResponseEachUnderItsOwnHeading(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	c := b.signIn("v")
	k := b.seedKey("acme", "payment.charge", "bodies-1", `{"amount":100,"currency":"CNY"}`, true)
	path := fmt.Sprintf("/keys/%d", k.ID)
	page := c.get(path)
	mustContain(t, "en", page.Body, "<h3>Request</h3>", "<h3>Response</h3>")
	if r := c.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("switch to zh-CN: %d", r.Status)
	}
	page = c.get(path)
	mustContain(t, "zh-CN", page.Body, "<h3>请求</h3>", "<h3>响应</h3>")
}

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
	b := setup(t, withSummaryOps)
	b.addOperator("v", access.RoleViewer, "*")
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
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
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
	mustContain(t, "timeline", body, `id="history"`, `<code class="code-muted">`+last.Kind+"</code></span></strong>",
		`datetime="`+last.At.UTC().Format(time.RFC3339)+`"`, last.At.UTC().Format("2006-01-02 15:04:05")+" UTC</time>", " ago</span>",
		`<dt>Event</dt><dd class="mono">#`+strconv.FormatInt(last.ID, 10)+`</dd>`)
	var detail bytes.Buffer
	if err := json.Indent(&detail, last.Detail, "", "  "); err != nil || detail.Len() < 3 {
		t.Fatalf("completed event detail %q: want a JSON object with fields", last.Detail)
	}
	mustContain(t, "timeline detail", body, "<pre>"+html.EscapeString(detail.String())+"</pre>")
}

// countingCounter is a claim.Counter for tests.
type countingCounter struct{ n atomic.Int64 }

func (c *countingCounter) Add(v float64) { c.n.Add(int64(v)) }

func TestKeyPage_ShowsTheClientsReplays409sAnd422sAfterAFlush(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	c := b.signIn("v")
	// A long flush period: the test flushes itself, so nothing is written before it asks.
	rec := claim.NewAnswerRecorder(b.db, claim.AnswerRecorderConfig{FlushEvery: time.Hour})
	api := httptest.NewServer(httpidem.OperationHandler(httpidem.Config{Store: b.claims, Service: "payments", Answers: rec,
		TenantFromRequest: func(*http.Request) (string, error) { return "acme", nil }}, b.fakeOp))
	t.Cleanup(api.Close)
	send := func(key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", api.URL, strings.NewReader(body))
		req.Header.Set(httpidem.HeaderKey, key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	const intent = `{"amount":100,"currency":"EUR"}`
	if res := send("ans-1", intent); res.StatusCode != 201 {
		t.Fatalf("first request: %d, want 201", res.StatusCode)
	}
	for i := 0; i < 3; i++ { // three replays aggregate into one record
		if res := send("ans-1", intent); res.StatusCode != 201 || res.Header.Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("replay: %d replayed=%q", res.StatusCode, res.Header.Get(httpidem.HeaderReplayed))
		}
	}
	if res := send("ans-1", `{"amount":999,"currency":"EUR"}`); res.StatusCode != 422 {
		t.Fatalf("reused key: %d, want 422", res.StatusCode)
	}
	// A key another attempt holds answers 409.
	held := b.seedKey("acme", "payment.charge", "ans-2", intent, false)
	if res := send("ans-2", intent); res.StatusCode != 409 {
		t.Fatalf("held key: %d, want 409", res.StatusCode)
	}
	var id int64
	if err := b.db.Raw(`SELECT id FROM idempotency_keys WHERE key = 'ans-1'`).Scan(&id).Error; err != nil || id == 0 {
		t.Fatalf("key ans-1: %v", err)
	}
	k := &claim.Key{ID: id}

	// Nothing is written on the answering path: before the flush the page shows no answers.
	mustContain(t, "before flush", c.get(fmt.Sprintf("/keys/%d", k.ID)).Body, "No replays and no 409 or 422 answers recorded")
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	page := c.get(fmt.Sprintf("/keys/%d", k.ID)).Body
	mustContain(t, "after flush", page, `<tr class="answer-replay"><td>replayed from the stored response</td><td class="num">201</td><td class="num">3</td>`,
		`<tr class="answer-mismatch"><td>key reused with another request (422)</td><td class="num">422</td><td class="num">1</td>`)
	mustNotContain(t, "after flush", page, "answer-in_progress")
	page = c.get(fmt.Sprintf("/keys/%d", held.ID)).Body
	mustContain(t, "held key", page, `<tr class="answer-in_progress"><td>in progress (409)</td><td class="num">409</td><td class="num">1</td>`)

	// A second flush adds to the same records.
	send("ans-1", intent)
	rec.Stop() // flushes what it holds
	page = c.get(fmt.Sprintf("/keys/%d", k.ID)).Body
	mustContain(t, "after stop", page, `<td class="num">201</td><td class="num">4</td>`)
}

func TestAnswerRecorder_BufferIsBounded(t *testing.T) {
	b := setup(t)
	k := b.seedKey("acme", "payment.charge", "bound-1", `{"amount":1,"currency":"EUR"}`, true)
	dropped := &countingCounter{}
	rec := claim.NewAnswerRecorder(b.db, claim.AnswerRecorderConfig{MaxPending: 2, FlushEvery: time.Hour, Dropped: dropped})
	rec.Record(k.ID, claim.AnswerReplay, 201)
	rec.Record(k.ID, claim.AnswerMismatch, 422)
	for i := 0; i < 50; i++ { // repeats of a held record only count
		rec.Record(k.ID, claim.AnswerReplay, 201)
	}
	rec.Record(k.ID, claim.AnswerInProgress, 409) // a third distinct record does not fit
	rec.Record(k.ID+1, claim.AnswerReplay, 201)
	if got := rec.Pending(); got != 2 {
		t.Errorf("pending = %d, want the bound 2", got)
	}
	if got, n := rec.Dropped(), dropped.n.Load(); got != 2 || n != 2 {
		t.Errorf("dropped = %d (metric %d), want 2", got, n)
	}
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec.Pending() != 0 {
		t.Errorf("pending after flush = %d, want 0", rec.Pending())
	}
	answers, err := b.claims.Answers(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[claim.AnswerKind]int64{}
	for _, a := range answers {
		counts[a.Kind] = a.Count
	}
	if counts[claim.AnswerReplay] != 51 || counts[claim.AnswerMismatch] != 1 || len(counts) != 2 {
		t.Errorf("stored answers %v, want replay 51 and mismatch 1", counts)
	}
	// Room again after the flush.
	rec.Record(k.ID, claim.AnswerInProgress, 409)
	if rec.Pending() != 1 {
		t.Errorf("pending = %d after a flush freed the buffer, want 1", rec.Pending())
	}
}

// TestKeyPage_EventsShowTheTraceTheyWereWrittenIn: an event written by a traced call carries its
// trace id, and the key page shows it on that event, to look the trace up.
func TestKeyPage_EventsShowTheTraceTheyWereWrittenIn(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	c := b.signIn("v")
	k := b.seedKey("acme", "payment.charge", "tr-1", `{"amount":100,"currency":"EUR"}`, true)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	traced, err := claim.NewStore(b.db, claim.Config{DigestSecret: testSecret, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "operator check")
	if err := traced.RecordEvent(ctx, k.ID, "downstream_checked", "operator:v", map[string]any{"answer": "found"}); err != nil {
		t.Fatal(err)
	}
	span.End()
	id := span.SpanContext().TraceID().String()
	body := c.get(fmt.Sprintf("/keys/%d", k.ID)).Body
	mustContain(t, "traced event", body, `<dt>Trace</dt><dd class="mono trace-id">`+id+`</dd>`)
	if n := strings.Count(body, `class="mono trace-id"`); n != 1 {
		t.Errorf("%d events show a trace; want only the traced one", n)
	}
}

// TestTracing_ConsoleActionsAreSpansAndTheirKeyEventsCarryTheTrace: each console request is a
// server span named by its route; an operator's action (check downstream) traces down into the
// claim path, and the key event it writes carries that request's trace id.
func TestTracing_ConsoleActionsAreSpansAndTheirKeyEventsCarryTheTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	b := newBundle(t, func(c *Config) {
		st, err := claim.NewStore(c.DB, claim.Config{DigestSecret: testSecret, TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		c.Claims, c.TracerProvider = st, tp
	})
	b.addOperator("olga", access.RoleOperator, "acme")
	c := b.signIn("olga")
	k := b.seedKey("acme", "payment.charge", "act-1", `{"amount":100,"currency":"EUR"}`, true)
	if r := c.post(fmt.Sprintf("/keys/%d/check", k.ID), url.Values{}, true); r.Status >= 400 {
		t.Fatalf("check downstream: %d", r.Status)
	}
	var check tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "POST /keys/:id/check" {
			check = s
		}
	}
	if check.Name == "" || check.SpanKind != trace.SpanKindServer {
		t.Fatalf("no server span for the check among %d spans", len(exp.GetSpans()))
	}
	evs, err := b.claims.History(context.Background(), k.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || strings.Contains(string(e.Detail), check.SpanContext.TraceID().String())
	}
	if !found {
		t.Errorf("no key event carries the check's trace %s: %v", check.SpanContext.TraceID(), evs)
	}
}
