package paysim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemops/idemops/errs"
)

// Callback event types: what a channel tells the merchant asynchronously about an order.
const (
	EventSucceeded = "charge.succeeded"
	EventClosed    = "charge.closed"
	EventRefunded  = "charge.refunded"
)

// HeaderSignature carries a callback's signature: "t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>" under the notify secret>".
const HeaderSignature = "Paysim-Signature"

// Callback delivery states.
const (
	CallbackPending   = "pending"
	CallbackDelivered = "delivered"
	CallbackGaveUp    = "gave_up"
)

// CallbackEvent is the body paysim POSTs to the notify URL.
type CallbackEvent struct {
	ID              string    `json:"id"`
	Type            string    `json:"type"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	ChargeID        string    `json:"charge_id,omitempty"`
	RefundID        string    `json:"refund_id,omitempty"`
	AmountMinor     int64     `json:"amount_minor"`
	Currency        string    `json:"currency,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
}

// Callback is one event with its delivery record.
type Callback struct {
	CallbackEvent
	Status string `json:"status"`
	// Attempts counts POSTs; Acks counts acknowledged ones (more than one after a duplicate).
	Attempts      int       `json:"attempts"`
	Acks          int       `json:"acks"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	LastError     string    `json:"last_error,omitempty"`

	// Faults decided when the event was made.
	Duplicate bool `json:"duplicate,omitempty"` // acknowledged, then sent once more
	Held      bool `json:"held,omitempty"`      // reordered: waits for the order's next event
	LateClose bool `json:"late_close,omitempty"`
	inFlight  bool
}

// Sign returns the HeaderSignature value for body at time t under secret.
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + signature(secret, ts, body)
}

func signature(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// ErrBadSignature: a callback's signature is missing, malformed, wrong or too old.
var ErrBadSignature = errs.New(errs.Unauthorized, "paysim callback signature invalid")

// VerifySignature checks header (a HeaderSignature value) against body under secret, and that
// its time is within tolerance of now, so a captured callback cannot be replayed for ever.
func VerifySignature(secret, body []byte, header string, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside %v", ErrBadSignature, tolerance)
	}
	if !hmac.Equal([]byte(sig), []byte(signature(secret, ts, body))) {
		return fmt.Errorf("%w: mismatch", ErrBadSignature)
	}
	return nil
}

// SetNotifyURL sets where callbacks go (empty: they wait). The demo learns its URL after
// paysim starts.
func (s *Server) SetNotifyURL(u string) {
	s.mu.Lock()
	s.cfg.NotifyURL = u
	s.mu.Unlock()
	s.wakeNotifier()
}

// Callbacks returns a copy of every callback the channel holds, oldest first (tests, the demo).
func (s *Server) Callbacks() []Callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Callback, len(s.st.Callbacks))
	for i, c := range s.st.Callbacks {
		out[i] = *c
	}
	return out
}

// CallbacksChanged receives a signal after each callback delivery attempt (at most one waits), so
// a test or the demo waits for the channel's event instead of polling Callbacks.
func (s *Server) CallbacksChanged() <-chan struct{} { return s.attempted }

// CallbacksSettled reports whether no callback is waiting for delivery.
func (s *Server) CallbacksSettled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.st.Callbacks {
		if c.Status == CallbackPending {
			return false
		}
	}
	return true
}

// emitCallback stages an event for the order and decides its faults: from the seed (rates)
// or, for the request that caused it, from f (X-Paysim-Fault); callers hold s.mu and call
// s.changed() after. Without a notify URL no callback is made.
func (s *Server) emitCallback(f faults, ev CallbackEvent) {
	if s.cfg.NotifyURL == "" {
		return
	}
	now := s.cfg.Now().UTC()
	if len(s.st.Callbacks) >= s.cfg.MaxNotifications {
		s.compactCallbacks()
		if len(s.st.Callbacks) >= s.cfg.MaxNotifications {
			s.cfg.Logger.Error("paysim: callback dropped: the channel holds its maximum number of pending callbacks")
			return
		}
	}
	ev.ID = s.st.newID(s.cfg.Seed, "evt_")
	ev.CreatedAt = now
	cb := &Callback{CallbackEvent: ev, Status: CallbackPending, NextAttemptAt: now}
	if !f.none {
		cb.Duplicate = f.notifyDup || s.roll("notify-duplicate", ev.ID, 0) < s.cfg.NotifyDuplicateRate
		cb.Held = f.notifyReorder || s.roll("notify-reorder", ev.ID, 0) < s.cfg.NotifyReorderRate
		cb.LateClose = ev.Type == EventSucceeded && (f.lateClose || s.roll("late-close", ev.ID, 0) < s.cfg.LateCloseRate)
		switch {
		case f.notifyDelay > 0:
			cb.NextAttemptAt = now.Add(f.notifyDelay)
		case s.roll("notify-delay", ev.ID, 0) < s.cfg.NotifyDelayRate:
			cb.NextAttemptAt = now.Add(s.cfg.NotifyDelay)
		}
	}
	if cb.Held { // released when the order's next event is first tried, or after NotifyDelay
		cb.NextAttemptAt = cb.NextAttemptAt.Add(s.cfg.NotifyDelay)
	}
	s.st.Callbacks = append(s.st.Callbacks, cb)
	defer s.wakeNotifier()
}

// compactCallbacks forgets settled callbacks (oldest first) to make room; callers hold s.mu.
func (s *Server) compactCallbacks() {
	kept := s.st.Callbacks[:0]
	for _, c := range s.st.Callbacks {
		if c.Status == CallbackPending {
			kept = append(kept, c)
		}
	}
	clear(s.st.Callbacks[len(kept):])
	s.st.Callbacks = kept
}

func (s *Server) wakeNotifier() {
	select {
	case s.notifyWake <- struct{}{}:
	default:
	}
}

// callbackBatch bounds how many callbacks one pass of the notifier sends.
const callbackBatch = 32

// notifyLoop delivers due callbacks until Close: each pass takes up to callbackBatch due ones
// and POSTs them concurrently (NotifyWorkers at a time).
func (s *Server) notifyLoop() {
	defer s.saverRun.Done()
	t := time.NewTicker(s.cfg.NotifyPoll)
	defer t.Stop()
	hc := &http.Client{Timeout: s.cfg.NotifyTimeout}
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.notifyWake:
		}
		s.mu.Lock()
		url := s.cfg.NotifyURL
		now := s.cfg.Now().UTC()
		var due []*Callback
		for _, c := range s.st.Callbacks {
			if len(due) == callbackBatch {
				break
			}
			if c.Status == CallbackPending && !c.inFlight && !c.NextAttemptAt.After(now) {
				c.inFlight = true
				due = append(due, c)
			}
		}
		s.mu.Unlock()
		if url == "" || len(due) == 0 {
			s.mu.Lock()
			for _, c := range due {
				c.inFlight = false
			}
			s.mu.Unlock()
			continue
		}
		sem := make(chan struct{}, s.cfg.NotifyWorkers)
		var wg sync.WaitGroup
		for _, c := range due {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				s.deliver(hc, url, c)
			}()
		}
		wg.Wait()
	}
}

// deliver POSTs one callback and records the outcome: acknowledged (2xx) or retried on the
// schedule, giving up after its last step.
func (s *Server) deliver(hc *http.Client, url string, c *Callback) {
	s.mu.Lock()
	ev := c.CallbackEvent
	s.mu.Unlock()
	body, _ := json.Marshal(ev)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	var res *http.Response
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderSignature, Sign(s.cfg.NotifySecret, body, s.cfg.Now()))
		res, err = hc.Do(req)
	}
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			err = fmt.Errorf("answered %d", res.StatusCode)
		}
	}
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	c.inFlight = false
	c.Attempts++
	now := s.cfg.Now().UTC()
	if c.Attempts == 1 { // the order's next event has been tried: release what was held back
		for _, o := range s.st.Callbacks {
			if o != c && o.Held && o.Status == CallbackPending && o.MerchantOrderNo == c.MerchantOrderNo {
				o.Held = false
				o.NextAttemptAt = now
			}
		}
	}
	switch {
	case err != nil:
		c.LastError = err.Error()
		if c.Attempts > len(s.cfg.NotifySchedule) {
			c.Status = CallbackGaveUp
			s.cfg.Logger.Warn("paysim: callback given up", "event", c.ID, "attempts", c.Attempts, "err", c.LastError)
		} else {
			c.NextAttemptAt = now.Add(s.cfg.NotifySchedule[c.Attempts-1])
		}
	default:
		c.Acks++
		c.LastError = ""
		c.Held = false
		if c.Duplicate && c.Acks == 1 { // the channel did not see the ack: it sends again
			c.NextAttemptAt = now
		} else {
			c.Status = CallbackDelivered
		}
		if c.LateClose && c.Acks == 1 { // a stale "closed" for an order that was paid
			s.emitCallback(faults{none: true}, CallbackEvent{Type: EventClosed, MerchantOrderNo: c.MerchantOrderNo,
				ChargeID: c.ChargeID, AmountMinor: c.AmountMinor, Currency: c.Currency})
		}
	}
	s.changed()
	select {
	case s.attempted <- struct{}{}:
	default: // a signal is pending: whoever waits reads the callbacks afresh anyway
	}
}

// adminCloseOrder handles POST /_paysim/orders/{merchant_order_no}/close: the channel closes
// an order nobody paid (WeChat Pay's closeorder) and notifies the merchant. An order with a
// succeeded charge cannot be closed (409 order_paid).
func (s *Server) adminCloseOrder(w http.ResponseWriter, r *http.Request) {
	order := r.PathValue("key")
	if err := validKey("merchant_order_no", order); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f, err := s.decideFaults(r, "close", order)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	s.mu.Lock()
	if s.firstSucceeded(order) != nil {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "order_paid", "the order has a succeeded charge and cannot be closed")
		return
	}
	s.emitCallback(f, CallbackEvent{Type: EventClosed, MerchantOrderNo: order})
	s.changed()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"merchant_order_no": order, "status": "closed"})
}

// RetryCallbacksNow makes every pending callback due at once (an operator's "resend", and
// tests that cannot wait for the schedule).
func (s *Server) RetryCallbacksNow() {
	s.mu.Lock()
	now := s.cfg.Now().UTC()
	for _, c := range s.st.Callbacks {
		if c.Status == CallbackPending {
			c.NextAttemptAt = now
		}
	}
	s.mu.Unlock()
	s.wakeNotifier()
}
