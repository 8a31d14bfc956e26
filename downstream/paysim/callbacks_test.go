package paysim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
)

// receiver is a merchant's notify endpoint that records what arrives, verifying signatures,
// and refuses the first attempt of every event (so each is retried once).
type receiver struct {
	mu       sync.Mutex
	got      []paysim.CallbackEvent // acknowledged
	seen     []paysim.CallbackEvent // every attempt
	attempts map[string]int
	badSig   int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if err := paysim.VerifySignature([]byte("s3cret"), b, r.Header.Get(paysim.HeaderSignature), time.Now(), time.Minute); err != nil {
		rc.mu.Lock()
		rc.badSig++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev paysim.CallbackEvent
	_ = json.Unmarshal(b, &ev)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts[ev.ID]++
	rc.seen = append(rc.seen, ev)
	if rc.attempts[ev.ID] == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rc.got = append(rc.got, ev)
}

func (rc *receiver) types(order string, all bool) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	evs := rc.got
	if all {
		evs = rc.seen
	}
	for _, ev := range evs {
		if ev.MerchantOrderNo == order {
			out = append(out, ev.Type)
		}
	}
	return out
}

func settle(t *testing.T, srv *paysim.Server) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !srv.CallbacksSettled() {
		select {
		case <-srv.CallbacksChanged():
		case <-timeout:
			t.Fatalf("callbacks still pending: %+v", srv.Callbacks())
		}
	}
}

func TestCallbacks_RetriedSignedDuplicatedReorderedAndLateClosed(t *testing.T) {
	t.Parallel()
	rc := &receiver{attempts: map[string]int{}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	srv, c := start(t, paysim.Config{NotifyURL: hook.URL, NotifySecret: []byte("s3cret"),
		NotifySchedule: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, NotifyPoll: 5 * time.Millisecond,
		NotifyDelay: 5 * time.Second})
	ctx := context.Background()

	// Reordered and duplicated: the succeeded callback waits for the refund's.
	if _, err := c.CreateCharge(ctx, "o-reorder", charge(500, "CNY", "", "bob", ""), "notify-reorder,notify-duplicate"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refund(ctx, "o-reorder", "r1", paysim.RefundRequest{AmountMinor: 500}); err != nil {
		t.Fatal(err)
	}
	// A late close after the succeeded one; and a plain close of an unpaid order.
	if _, err := c.CreateCharge(ctx, "o-late", charge(700, "CNY", "", "bob", ""), "late-close"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseOrder(ctx, "o-unpaid", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseOrder(ctx, "o-late", ""); !errors.Is(err, paysim.ErrRejected) && err == nil {
		t.Fatal("closing a paid order was accepted")
	}
	settle(t, srv)

	// The held succeeded callback is first tried only after the refund's first try.
	if seen := rc.types("o-reorder", true); seen[0] != paysim.EventRefunded {
		t.Fatalf("o-reorder attempts %v, want the refund's first", seen)
	}
	n := map[string]int{}
	for _, typ := range rc.types("o-reorder", false) {
		n[typ]++
	}
	if n[paysim.EventSucceeded] != 2 || n[paysim.EventRefunded] != 1 {
		t.Fatalf("o-reorder acknowledged %v, want succeeded twice (duplicate) and refunded once", n)
	}
	want := map[string][]string{
		"o-late":   {paysim.EventSucceeded, paysim.EventClosed},
		"o-unpaid": {paysim.EventClosed},
	}
	for order, w := range want {
		got := rc.types(order, false)
		if len(got) != len(w) {
			t.Fatalf("%s: got %v, want %v", order, got, w)
		}
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("%s: got %v, want %v", order, got, w)
			}
		}
	}
	for _, cb := range srv.Callbacks() {
		if cb.Status != paysim.CallbackDelivered || cb.Attempts < 2 {
			t.Fatalf("callback %s %s: %s after %d attempts, want delivered after a refused first one", cb.MerchantOrderNo, cb.Type, cb.Status, cb.Attempts)
		}
	}
	if rc.badSig != 0 {
		t.Fatalf("%d callbacks failed their signature", rc.badSig)
	}
}

func TestCallbacks_GiveUpAfterTheSchedule(t *testing.T) {
	t.Parallel()
	var n sync.Map
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := n.LoadOrStore("n", new(int))
		*(v.(*int))++
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(hook.Close)
	srv, c := start(t, paysim.Config{NotifyURL: hook.URL, NotifySchedule: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond},
		NotifyPoll: 5 * time.Millisecond})
	if _, err := c.CreateCharge(context.Background(), "o1", charge(100, "CNY", "", "bob", ""), ""); err != nil {
		t.Fatal(err)
	}
	settle(t, srv)
	cbs := srv.Callbacks()
	if len(cbs) != 1 || cbs[0].Status != paysim.CallbackGaveUp || cbs[0].Attempts != 3 {
		t.Fatalf("callbacks %+v, want one given up after 3 attempts", cbs)
	}
}

func TestVerifySignature_RefusesWrongSecretAndOldTimestamps(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	now := time.Now()
	h := paysim.Sign([]byte("k"), body, now)
	if err := paysim.VerifySignature([]byte("k"), body, h, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"wrong secret": paysim.VerifySignature([]byte("other"), body, h, now, time.Minute),
		"other body":   paysim.VerifySignature([]byte("k"), []byte(`{"id":"evt_2"}`), h, now, time.Minute),
		"too old":      paysim.VerifySignature([]byte("k"), body, h, now.Add(10*time.Minute), time.Minute),
		"malformed":    paysim.VerifySignature([]byte("k"), body, "v1=abc", now, time.Minute),
	} {
		if !errors.Is(err, paysim.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

// TestCallbacks_PendingOnesSurviveARestart: a callback not yet acknowledged is in the state
// file, so a restarted channel still delivers it.
func TestCallbacks_PendingOnesSurviveARestart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "state.json")
	cfg := paysim.Config{StateFile: file, NotifyURL: "http://127.0.0.1:1/unreachable", NotifyPoll: 5 * time.Millisecond,
		NotifySchedule: []time.Duration{time.Hour}}
	srv, c := start(t, cfg)
	if _, err := c.CreateCharge(context.Background(), "o-durable", charge(100, "CNY", "", "bob", ""), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.CallbacksChanged():
	case <-time.After(5 * time.Second):
		t.Fatal("the first attempt never happened")
	}
	if srv.Callbacks()[0].Attempts == 0 {
		t.Fatal("an attempt was signalled but not counted")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	rc := &receiver{attempts: map[string]int{}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	cfg.NotifyURL, cfg.NotifySecret = hook.URL, []byte("s3cret")
	cfg.NotifySchedule = []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}
	again, err := paysim.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Close() })
	// The restored callback waits for its scheduled retry (an hour); the test moves it up.
	cbs := again.Callbacks()
	if len(cbs) != 1 || cbs[0].Status != paysim.CallbackPending || cbs[0].Attempts != 1 {
		t.Fatalf("restored callbacks %+v, want one pending after one failed attempt", cbs)
	}
	again.RetryCallbacksNow()
	settle(t, again)
	if got := rc.types("o-durable", false); len(got) != 1 || got[0] != paysim.EventSucceeded {
		t.Fatalf("after the restart the merchant got %v", got)
	}
}
