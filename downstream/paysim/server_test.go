package paysim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
)

func TestCharge_SameKeySameBodyIsOneCharge(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	ctx := context.Background()
	req := charge(1000, "cny", "", "alice", "tea")
	first, err := c.CreateCharge(ctx, "order-1", req, "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateCharge(ctx, "order-1", req, "")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != again.ID || first.Status != paysim.StatusSucceeded || first.Currency != "CNY" || first.MerchantOrderNo != "order-1" {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if n := srv.ChargeCount("order-1"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
	got, err := c.GetCharge(ctx, "order-1")
	if err != nil || got.ID != first.ID {
		t.Fatalf("lookup = %+v, %v", got, err)
	}
}

func TestCharge_ReplayAnswers200WithReplayedHeader(t *testing.T) {
	t.Parallel()
	srv, _ := start(t, paysim.Config{})
	post := func() *http.Response {
		r, _ := http.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount_minor":5,"currency":"CNY"}`))
		r.Header.Set(paysim.HeaderIdempotencyKey, "k1")
		w := &recorder{header: http.Header{}}
		srv.ServeHTTP(w, r)
		return &http.Response{StatusCode: w.status, Header: w.header}
	}
	if r := post(); r.StatusCode != http.StatusCreated || r.Header.Get(paysim.HeaderReplayed) != "" {
		t.Fatalf("first: %d %v", r.StatusCode, r.Header)
	}
	if r := post(); r.StatusCode != http.StatusOK || r.Header.Get(paysim.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %v", r.StatusCode, r.Header)
	}
}

func TestCharge_SameKeyOtherBodyIs422(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	ctx := context.Background()
	if _, err := c.CreateCharge(ctx, "order-1", charge(1000, "CNY", "", "alice", "tea"), ""); err != nil {
		t.Fatal(err)
	}
	for _, other := range []paysim.ChargeRequest{
		charge(1001, "CNY", "", "alice", "tea"), charge(1000, "USD", "", "alice", "tea"),
		charge(1000, "CNY", "", "bob", "tea"), charge(1000, "CNY", "", "alice", "coffee"),
	} {
		_, err := c.CreateCharge(ctx, "order-1", other, "")
		var ae *paysim.APIError
		if !errors.Is(err, paysim.ErrKeyReused) || !errors.As(err, &ae) || ae.Status != 422 {
			t.Errorf("%+v: err = %v, want 422", other, err)
		}
	}
	if n := srv.ChargeCount("order-1"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestCharge_ConcurrentSameKeyIsOneCharge(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	var wg sync.WaitGroup
	ids := make([]string, 50)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := c.CreateCharge(context.Background(), "order-c", charge(300, "CNY", "", "p", ""), "")
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = ch.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different ids: %v", ids)
		}
	}
	if n := srv.ChargeCount("order-c"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestCharge_RejectsBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		key   string
		req   paysim.ChargeRequest
		field string
	}{
		{"k", charge(0, "CNY", "", "", ""), "amount_minor"},
		{"k", charge(1, "XXX", "", "", ""), "currency"},
		{"", charge(1, "CNY", "", "", ""), "merchant_order_no"},
		{"k", charge(1, "CNY", "other", "", ""), "merchant_order_no"},
		{strings.Repeat("k", 256), charge(1, "CNY", "", "", ""), "Idempotency-Key"},
	} {
		_, err := c.CreateCharge(ctx, tc.key, tc.req, "")
		if !errors.Is(err, paysim.ErrRejected) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err = %v, want a 400 naming %s", tc.req, err, tc.field)
		}
	}
}

func TestCharge_DeclinedPayeeAndAmountFail(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{DeclinePayees: []string{"blocked"}, DeclineAmounts: []int64{666}})
	ctx := context.Background()
	for key, req := range map[string]paysim.ChargeRequest{"a": charge(10, "CNY", "", "blocked", ""), "b": charge(666, "CNY", "", "ok", "")} {
		ch, err := c.CreateCharge(ctx, key, req, "")
		if err != nil || ch.Status != paysim.StatusFailed || ch.FailureCode != "declined" {
			t.Errorf("%s: %+v, %v; want a declined charge", key, ch, err)
		}
	}
	ch, err := c.CreateCharge(ctx, "c", charge(10, "CNY", "", "ok", ""), "")
	if err != nil || ch.Status != paysim.StatusSucceeded {
		t.Errorf("ordinary charge: %+v, %v", ch, err)
	}
}

func TestCharge_WithoutKeyIsNotIdempotentAndDoubleChargeFaultChargesTwice(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	ctx := context.Background()
	req := charge(100, "CNY", "order-nokey", "p", "")
	if _, err := c.CreateCharge(ctx, "", req, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCharge(ctx, "", req, ""); err != nil {
		t.Fatal(err)
	}
	if n := srv.ChargeCount("order-nokey"); n != 2 {
		t.Fatalf("two key-less calls: %d charges, want 2", n)
	}
	if _, err := c.CreateCharge(ctx, "", charge(100, "CNY", "order-double", "p", ""), paysim.FaultDoubleCharge); err != nil {
		t.Fatal(err)
	}
	list, err := c.Charges(ctx, "order-double")
	if err != nil || list.Count != 2 || list.Charges[0].ID == list.Charges[1].ID {
		t.Fatalf("one key-less call with the fault: %+v, %v; want two distinct charges", list, err)
	}
	// With a key the fault cannot double charge: the key protects it.
	if _, err := c.CreateCharge(ctx, "order-keyed", charge(100, "CNY", "", "p", ""), paysim.FaultDoubleCharge); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.ChargeCount(ctx, "order-keyed"); n != 1 {
		t.Fatalf("keyed call with the fault: %d charges, want 1", n)
	}
}

func TestCharge_DoubleChargeRateAppliesToKeylessCalls(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{Seed: 7, DoubleChargeRate: 1})
	if _, err := c.CreateCharge(context.Background(), "", charge(100, "CNY", "o1", "p", ""), ""); err != nil {
		t.Fatal(err)
	}
	if n := srv.ChargeCount("o1"); n != 2 {
		t.Fatalf("charges = %d, want 2", n)
	}
}

func TestFaults_ErrorCommitsNothing(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	_, err := c.CreateCharge(context.Background(), "k", charge(100, "CNY", "", "p", ""), paysim.FaultError)
	if !errors.Is(err, paysim.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := srv.ChargeCount("k"); n != 0 {
		t.Fatalf("charges = %d, want 0", n)
	}
}

func TestFaults_DropResponseCommitsThenLeavesTheCallerInTheDark(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	ctx := context.Background()
	req := charge(100, "CNY", "", "p", "")
	_, err := c.CreateCharge(ctx, "k", req, paysim.FaultDropResponse)
	var ae *paysim.APIError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("err = %v, want a transport error (no answer at all)", err)
	}
	if n := srv.ChargeCount("k"); n != 1 {
		t.Fatalf("charges = %d, want 1 (committed before the drop)", n)
	}
	got, err := c.GetCharge(ctx, "k")
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	again, err := c.CreateCharge(ctx, "k", req, "")
	if err != nil || again.ID != got.ID || srv.ChargeCount("k") != 1 {
		t.Fatalf("retry: %+v, %v; want the same charge", again, err)
	}
}

// faultPattern sends the same 40 charges to a fresh paysim with seed and says which failed.
func faultPattern(t *testing.T, seed int64) string {
	t.Helper()
	srv, c := start(t, paysim.Config{Seed: seed, ErrorRate: 0.3, DropResponseRate: 0.2, LatencyJitter: time.Millisecond})
	var b strings.Builder
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("order-%d", i)
		_, err := c.CreateCharge(context.Background(), key, charge(100, "CNY", "", "p", ""), "")
		var ae *paysim.APIError
		switch {
		case errors.As(err, &ae):
			b.WriteByte('E')
		case err != nil:
			b.WriteByte('D')
		default:
			b.WriteByte('.')
		}
		if (err == nil || !errors.As(err, &ae)) != (srv.ChargeCount(key) == 1) {
			t.Fatalf("%s: err %v but %d charges", key, err, srv.ChargeCount(key))
		}
	}
	return b.String()
}

func TestFaults_AreDeterministicBySeed(t *testing.T) {
	t.Parallel()
	a, b, other := faultPattern(t, 1), faultPattern(t, 1), faultPattern(t, 2)
	if a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	if a == other {
		t.Fatalf("seeds 1 and 2 gave the same faults: %s", a)
	}
	if !strings.Contains(a, "E") || !strings.Contains(a, "D") || !strings.Contains(a, ".") {
		t.Fatalf("pattern %s lacks errors, drops or successes", a)
	}
}

func TestFaults_HeaderNoneSuppressesConfiguredFaults(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{ErrorRate: 1})
	if _, err := c.CreateCharge(context.Background(), "k", charge(1, "CNY", "", "", ""), paysim.FaultNone); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateCharge(context.Background(), "k2", charge(1, "CNY", "", "", ""), "bogus")
	if !errors.Is(err, paysim.ErrRejected) || !strings.Contains(err.Error(), paysim.HeaderFault) {
		t.Fatalf("unknown fault: %v", err)
	}
}

func TestFaults_LatencyIsApplied(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	t0 := time.Now()
	if _, err := c.GetCharge(context.Background(), "none"); !errors.Is(err, paysim.ErrNotFound) {
		t.Fatal(err)
	}
	fast := time.Since(t0)
	_, err := c.CreateCharge(context.Background(), "k", charge(1, "CNY", "", "", ""), "latency=150ms")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0) - fast; d < 150*time.Millisecond {
		t.Fatalf("took %v, want ≥ 150ms", d)
	}
}

func TestRefund_IsIdempotentAndBounded(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	ctx := context.Background()
	if _, err := c.CreateCharge(ctx, "o", charge(1000, "CNY", "", "p", ""), ""); err != nil {
		t.Fatal(err)
	}
	r1, err := c.Refund(ctx, "o", "r1", paysim.RefundRequest{AmountMinor: 600})
	if err != nil {
		t.Fatal(err)
	}
	r1again, err := c.Refund(ctx, "o", "r1", paysim.RefundRequest{AmountMinor: 600})
	if err != nil || r1again.ID != r1.ID {
		t.Fatalf("replay: %+v, %v", r1again, err)
	}
	if _, err := c.Refund(ctx, "o", "r1", paysim.RefundRequest{AmountMinor: 500}); !errors.Is(err, paysim.ErrKeyReused) {
		t.Fatalf("same refund key, other amount: %v", err)
	}
	if _, err := c.Refund(ctx, "o", "r2", paysim.RefundRequest{AmountMinor: 401}); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("over-refund: %v, want 409", err)
	}
	if _, err := c.Refund(ctx, "missing", "r3", paysim.RefundRequest{AmountMinor: 1}); !errors.Is(err, paysim.ErrNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	ch, _ := c.GetCharge(ctx, "o")
	if ch.RefundedMinor != 600 {
		t.Fatalf("refunded = %d, want 600", ch.RefundedMinor)
	}
}

func TestNotification_IsIdempotentAndCountsDeliveries(t *testing.T) {
	t.Parallel()
	srv, c := start(t, paysim.Config{})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		body := json.RawMessage(`{"payment_id": "p1", "amount_minor": 100}`)
		if i == 2 {
			body = json.RawMessage(`{"amount_minor":100,"payment_id":"p1"}`) // same object, other spelling
		}
		if _, err := c.Notify(ctx, "n1", body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Notify(ctx, "n1", json.RawMessage(`{"payment_id":"p2"}`)); !errors.Is(err, paysim.ErrKeyReused) {
		t.Fatalf("other body: %v, want 422", err)
	}
	n, err := c.GetNotification(ctx, "n1")
	if err != nil || n.Deliveries != 3 {
		t.Fatalf("notification = %+v, %v; want 3 deliveries", n, err)
	}
	if local, ok := srv.Notification("n1"); !ok || local.Deliveries != 3 {
		t.Fatalf("in-process = %+v", local)
	}
	if _, err := c.GetNotification(ctx, "n2"); !errors.Is(err, paysim.ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestAdmin_FabricatesChannelOnlyAndAlteredCharges(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	ctx := context.Background()
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	x, err := c.InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 99, Currency: "CNY", MerchantOrderNo: "ghost", CreatedAt: &at})
	if err != nil || !x.CreatedAt.Equal(at) || x.Status != paysim.StatusSucceeded {
		t.Fatalf("insert: %+v, %v", x, err)
	}
	amt, st := int64(98), paysim.StatusFailed
	if _, err := c.AlterCharge(ctx, x.ID, paysim.ChargeChange{AmountMinor: &amt, Status: &st}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetCharge(ctx, "ghost")
	if err != nil || got.AmountMinor != 98 || got.Status != paysim.StatusFailed {
		t.Fatalf("after alter: %+v, %v", got, err)
	}
	if _, err := c.AlterCharge(ctx, "ch_nope", paysim.ChargeChange{Status: &st}); !errors.Is(err, paysim.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestPersistence_RoundTrip(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "paysim.json")
	clk := &clock{}
	clk.Set("2024-03-15T02:00:00Z")
	cfg := paysim.Config{Seed: 3, Now: clk.Now, StateFile: file}
	ctx := context.Background()

	srv1, c1 := start(t, cfg)
	ch, err := c1.CreateCharge(ctx, "o1", charge(500, "CNY", "", "p", "x"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Refund(ctx, "o1", "r1", paysim.RefundRequest{AmountMinor: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Notify(ctx, "n1", json.RawMessage(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	before, _ := srv1.Statement("2024-03-15", paysim.FormatStripe)
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}

	srv2, c2 := start(t, cfg)
	got, err := c2.GetCharge(ctx, "o1")
	if err != nil || got.ID != ch.ID || got.RefundedMinor != 100 {
		t.Fatalf("reloaded charge: %+v, %v", got, err)
	}
	if again, err := c2.CreateCharge(ctx, "o1", charge(500, "CNY", "", "p", "x"), ""); err != nil || again.ID != ch.ID {
		t.Fatalf("the key survived the restart? %+v, %v", again, err)
	}
	if _, err := c2.CreateCharge(ctx, "o1", charge(501, "CNY", "", "p", "x"), ""); !errors.Is(err, paysim.ErrKeyReused) {
		t.Fatalf("fingerprint survived the restart? %v", err)
	}
	if _, err := c2.Refund(ctx, "o1", "r1", paysim.RefundRequest{AmountMinor: 100}); err != nil {
		t.Fatalf("refund key survived? %v", err)
	}
	if n, _ := c2.Notify(ctx, "n1", json.RawMessage(`{"a":1}`)); n == nil || n.Deliveries != 2 {
		t.Fatalf("notification after restart: %+v", n)
	}
	after, _ := srv2.Statement("2024-03-15", paysim.FormatStripe)
	if !bytes.Equal(before, after) {
		t.Fatalf("statement changed across the restart:\n%s\n%s", before, after)
	}
	other, err := c2.CreateCharge(ctx, "o2", charge(1, "CNY", "", "", ""), "")
	if err != nil || other.ID == ch.ID {
		t.Fatalf("new charge after restart reuses an id: %+v, %v", other, err)
	}
}

func TestNewServer_RejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []paysim.Config{{ErrorRate: 1.5}, {DropResponseRate: -0.1}, {Latency: -time.Second}, {FeeBasisPoints: 20000}} {
		if _, err := paysim.NewServer(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

// recorder is a minimal ResponseWriter for in-process calls (it cannot be hijacked).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) { r.status = s }

// paysim settles every active ISO 4217 currency with its ISO exponent (the money package's one
// table): 12345 minor units of IDR are 123.45 IDR, not 12345 — the console's old 100× error.
func TestCharge_AcceptsEveryISOCurrencyWithItsExponent(t *testing.T) {
	t.Parallel()
	_, c := start(t, paysim.Config{})
	ctx := context.Background()
	for i, cur := range []string{"IDR", "COP", "JPY", "BHD", "PKR"} {
		got, err := c.CreateCharge(ctx, "iso-"+itoa(i), charge(12345, cur, "", "alice", "tea"), "")
		if err != nil {
			t.Fatalf("%s: %v", cur, err)
		}
		if got.Currency != cur || got.AmountMinor != 12345 {
			t.Fatalf("%s: charge %+v", cur, got)
		}
	}
}

// A charge the channel confirmed is on disk before the answer: a second server loading the file
// while the first was never closed (as after kill -9) knows it.
func TestPersistence_ConfirmedChargeSurvivesWithoutClose(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "paysim.json")
	// A long interval: only the write before the answer can have saved the charge.
	cfg := paysim.Config{Seed: 5, StateFile: file, SaveInterval: time.Hour}
	ctx := context.Background()
	_, c1 := start(t, cfg)
	ch, err := c1.CreateCharge(ctx, "k1", charge(700, "EUR", "", "p", "x"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Refund(ctx, "k1", "r1", paysim.RefundRequest{AmountMinor: 200}); err != nil {
		t.Fatal(err)
	}
	srv2, err := paysim.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv2.ChargeCount("k1"); n != 1 {
		t.Fatalf("charges for k1 after a crash: %d, want 1 (%s)", n, ch.ID)
	}
	defer srv2.Close()
	ts := httptest.NewServer(srv2)
	defer ts.Close()
	got, err := paysim.NewClient(ts.URL, ts.Client()).GetCharge(ctx, "k1")
	if err != nil || got.ID != ch.ID || got.RefundedMinor != 200 {
		t.Fatalf("charge after a crash: %+v, %v", got, err)
	}
}
