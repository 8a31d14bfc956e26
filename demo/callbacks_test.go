package demo_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/templates"
)

// fastCallbacks makes paysim's retry schedule short enough for a test.
func fastCallbacks(cfg paysim.Config) paysim.Config {
	cfg.NotifyPoll = 5 * time.Millisecond
	cfg.NotifySchedule = make([]time.Duration, 30)
	for i := range cfg.NotifySchedule {
		cfg.NotifySchedule[i] = 20 * time.Millisecond
	}
	if cfg.NotifyDelay == 0 {
		cfg.NotifyDelay = 200 * time.Millisecond
	}
	return cfg
}

// settled waits until paysim has no callback left to send and checks every one was acknowledged.
func (e *env) settled() {
	e.t.Helper()
	timeout := time.After(20 * time.Second)
	for !e.w.Paysim.CallbacksSettled() {
		select {
		case <-e.w.Paysim.CallbacksChanged():
		case <-timeout:
			e.t.Fatal("callbacks still pending after 20 s")
		}
	}
	for _, cb := range e.w.Paysim.Callbacks() {
		if cb.Status != paysim.CallbackDelivered {
			e.t.Fatalf("callback %s %s: %s (%s)", cb.ID, cb.Type, cb.Status, cb.LastError)
		}
	}
}

func (e *env) orderStatus(paymentID string) string {
	e.t.Helper()
	var s string
	if err := e.w.Orders.DB.Raw(`SELECT status FROM demo_orders WHERE payment_id = ?`, paymentID).Scan(&s).Error; err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) orderNo(paymentID string) string {
	e.t.Helper()
	var s string
	e.w.Orders.DB.Raw(`SELECT merchant_order_no FROM demo_orders WHERE payment_id = ?`, paymentID).Scan(&s)
	return s
}

func TestCallbacks_ClosedAfterPaidStaysPaid(t *testing.T) {
	e := start(t, fastCallbacks(paysim.Config{Seed: 11}))
	r := e.pay("late-close-1", body, paysim.HeaderFault, paysim.FaultLateClose)
	if r.status != 201 {
		t.Fatalf("pay: %d %v", r.status, r.body)
	}
	e.settled()
	id := r.body["payment_id"].(string)
	if s := e.orderStatus(id); s != "paid" {
		t.Fatalf("order %s after a late close, want paid", s)
	}
	var outcomes []string
	e.w.Orders.DB.Raw(`SELECT event_type || ':' || outcome FROM demo_order_transitions WHERE merchant_order_no = ? ORDER BY id`,
		e.orderNo(id)).Scan(&outcomes)
	if strings.Join(outcomes, ",") != "charge.succeeded:applied,charge.closed:ignored" {
		t.Fatalf("transitions %v, want the paid one applied and the late close ignored", outcomes)
	}
	for _, cb := range e.w.Paysim.Callbacks() {
		if cb.Type == paysim.EventClosed && cb.Attempts != 1 {
			t.Fatalf("the late close took %d attempts; it must be acknowledged at once", cb.Attempts)
		}
	}
}

// TestCallbacks_DuplicatedAndReorderedReachTheRightFinalState: paysim duplicates, reorders
// and delays callbacks (seeded rates plus forced faults); every order ends where the channel's
// events lead, each real transition is applied once, and the balance is credited once per
// paid order and debited once per refund.
func TestCallbacks_DuplicatedAndReorderedReachTheRightFinalState(t *testing.T) {
	e := start(t, fastCallbacks(paysim.Config{Seed: 12, NotifyDuplicateRate: 0.3, NotifyReorderRate: 0.3,
		NotifyDelayRate: 0.2}))
	ctx := context.Background()
	const n = 24
	want := map[string]string{}
	var wantBalance int64
	for i := range n {
		amount := int64(100 + i)
		b := fmt.Sprintf(`{"amount_minor": %d, "currency": "CNY", "merchant_order_no": "cb-%d", "payee": "alice"}`, amount, i)
		var faults []string
		switch i % 4 {
		case 1:
			faults = []string{paysim.HeaderFault, "notify-reorder,notify-duplicate"}
		case 2:
			faults = []string{paysim.HeaderFault, "late-close,notify-duplicate"}
		}
		r := e.pay(fmt.Sprintf("cb-key-%d", i), b, faults...)
		if r.status != 201 {
			t.Fatalf("pay %d: %d %v", i, r.status, r.body)
		}
		id := r.body["payment_id"].(string)
		switch i % 4 {
		case 0, 2:
			want[id] = "paid"
			wantBalance += amount
		case 1: // refunded at once: its callback may overtake the held succeeded one
			if _, err := e.w.Client.Refund(ctx, e.orderNo(id), "rf-"+id, paysim.RefundRequest{AmountMinor: amount}); err != nil {
				t.Fatal(err)
			}
			want[id] = "refunded"
		case 3: // the merchant's order that was never paid: the channel closes it
			pgtest.Exec(t, e.w.Orders.DB, `INSERT INTO demo_orders (merchant_order_no, tenant, payment_id, amount_minor, currency, status)
				VALUES (?, 'acme', ?, ?, 'CNY', 'pending')`, "unpaid-"+id, "unpaid-"+id, amount)
			if err := e.w.Client.CloseOrder(ctx, "unpaid-"+id, "notify-duplicate"); err != nil {
				t.Fatal(err)
			}
			want["unpaid-"+id] = "closed"
			want[id] = "paid"
			wantBalance += amount
		}
	}
	e.settled()
	for id, st := range want {
		if got := e.orderStatus(id); got != st {
			t.Errorf("order of %s: %s, want %s", id, got, st)
		}
	}
	var applied, dup, notYet, ignored int64
	db := e.w.Orders.DB
	db.Raw(`SELECT count(*) FROM demo_order_transitions WHERE outcome = 'applied'`).Scan(&applied)
	db.Raw(`SELECT count(*) FROM demo_order_transitions WHERE outcome = 'duplicate'`).Scan(&dup)
	db.Raw(`SELECT count(*) FROM demo_order_transitions WHERE outcome = 'not_yet'`).Scan(&notYet)
	db.Raw(`SELECT count(*) FROM demo_order_transitions WHERE outcome = 'ignored'`).Scan(&ignored)
	// Applied: one paid per payment, one refund per refunded order, one close per unpaid order.
	if wantApplied := int64(n + n/4 + n/4); applied != wantApplied {
		t.Errorf("applied transitions %d, want %d", applied, wantApplied)
	}
	if dup < int64(n/4*3) || notYet == 0 || ignored != int64(n/4) {
		t.Errorf("duplicates %d (want ≥ %d), not-yet %d (want > 0), ignored late closes %d (want %d)", dup, n/4*3, notYet, ignored, n/4)
	}
	var balance int64
	db.Raw(`SELECT balance_minor FROM demo_balances WHERE id = 'acme|CNY'`).Scan(&balance)
	if balance != wantBalance {
		t.Errorf("balance %d, want %d (credited once per paid order, debited once per refund)", balance, wantBalance)
	}
}

func TestCallbacks_UnsignedOrMalformedAreRefused(t *testing.T) {
	secret := []byte("callback-test-secret")
	e := start(t, paysim.Config{Seed: 13, NotifySecret: secret})
	post := func(body, sig string) int {
		req, _ := http.NewRequest("POST", e.w.APIURL+demo.CallbackPath, strings.NewReader(body))
		if sig != "" {
			req.Header.Set(paysim.HeaderSignature, sig)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	ev := `{"id":"evt_1","type":"charge.succeeded","merchant_order_no":"x"}`
	if s := post(ev, ""); s != 401 {
		t.Errorf("unsigned: %d, want 401", s)
	}
	if s := post(ev, paysim.Sign([]byte("not-the-secret"), []byte(ev), time.Now())); s != 401 {
		t.Errorf("wrong secret: %d, want 401", s)
	}
	for name, tc := range map[string]struct {
		body string
		want int
	}{
		"NUL in the order number": {`{"id":"evt_1","type":"charge.succeeded","merchant_order_no":"x\u0000"}`, 400},
		"invalid UTF-8":           {"{\"id\":\"evt_1\",\"type\":\"charge.succeeded\",\"merchant_order_no\":\"\xff\"}", 400},
		"unknown type":            {`{"id":"evt_1","type":"charge.disputed","merchant_order_no":"x"}`, 400},
		"oversized":               {`{"id":"` + strings.Repeat("a", 20000) + `"}`, 413},
		"unknown order":           {ev, 404},
	} {
		if s := post(tc.body, paysim.Sign(secret, []byte(tc.body), time.Now())); s != tc.want {
			t.Errorf("%s: %d, want %d", name, s, tc.want)
		}
	}
}

// TestCallbacks_KeyPageShowsTheOrdersTransitions: the console panel of a payment key lists the
// order it opened and every callback, and shows nothing for the same key id under another tenant.
func TestCallbacks_KeyPageShowsTheOrdersTransitions(t *testing.T) {
	e := start(t, fastCallbacks(paysim.Config{Seed: 14}))
	r := e.pay("panel-1", body, paysim.HeaderFault, "late-close,notify-duplicate")
	if r.status != 201 {
		t.Fatalf("pay: %d %v", r.status, r.body)
	}
	e.settled()
	var keyID int64
	e.w.Orders.DB.Raw(`SELECT key_id FROM demo_orders WHERE payment_id = ?`, r.body["payment_id"]).Scan(&keyID)
	k, err := e.store.Get(context.Background(), keyID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.w.Orders.KeyPanel(context.Background(), k)
	if err != nil || p == nil {
		t.Fatalf("panel: %v %v", p, err)
	}
	var got []string
	for _, row := range p.Rows {
		got = append(got, row[1].String()+":"+row[5].String())
	}
	sort.Strings(got[1:]) // the duplicate and the late close race each other
	if strings.Join(got, ",") != "charge.succeeded:applied,charge.closed:ignored: can never apply,charge.succeeded:duplicate: already there" || !strings.Contains(p.Summary.String(), "is paid") {
		t.Fatalf("panel %q rows %v", p.Summary, got)
	}
	// Every word of the panel reaches a Chinese page translated: its title, columns, summary,
	// and the statuses and outcomes of its rows (ids, event types and times are not words).
	for _, s := range append([]string{p.Title, p.Summary.Format, p.Summary.Args[2].(errs.Phrase).Format}, p.Columns...) {
		if !templates.HasMessage(s) {
			t.Errorf("the panel's %q has no zh-CN catalog entry", s)
		}
	}
	for _, row := range p.Rows {
		for _, c := range row {
			if word, ok := c.Translated(); word && !ok {
				t.Errorf("the panel's word %q has no zh-CN catalog entry", c)
			}
		}
	}
	other := *k
	other.Tenant = "globex"
	if p, err := e.w.Orders.KeyPanel(context.Background(), &other); err != nil || p != nil {
		t.Fatalf("another tenant's view of the key: %+v %v, want nothing", p, err)
	}
}

func TestChannelTraffic_RefundsAndClosesReachTheOrders(t *testing.T) {
	e := start(t, fastCallbacks(paysim.Config{Seed: 15}))
	for i := range 3 {
		if r := e.pay(fmt.Sprintf("ct-%d", i), body); r.status != 201 {
			t.Fatalf("pay: %d", r.status)
		}
	}
	e.settled()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { e.w.RunChannelTraffic(ctx, 20*time.Millisecond, 1, nil); close(done) }()
	count := func(status string) int64 {
		var n int64
		e.w.Orders.DB.Raw(`SELECT count(*) FROM demo_orders WHERE status = ?`, status).Scan(&n)
		return n
	}
	pgtest.Await(t, e.w.Orders.DB, 5*time.Second, "a refunded and a closed order", func() bool {
		return count("refunded") > 0 && count("closed") > 0
	}, "demo_orders")
	cancel()
	<-done
}
