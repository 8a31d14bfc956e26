package paysim

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stripe's API as a Stripe balance reads it: GET /v1/payouts, GET /v1/balance_transactions and
// GET /v1/charges/{id}, authenticated by a registered secret key (Bearer). Every succeeded charge
// and refund is a balance transaction, available two days after its UTC day; each UTC day's
// transactions of one currency go out in one automatic payout arriving then (listed once it has
// arrived), with the payout's own balance transaction. Lists are newest first, paged with limit
// and starting_after, as Stripe's are; expand[]=data.source embeds the source objects. The
// charge's metadata carries the merchant's order number (order_no), the refund's its refund
// number (refund_no).

// stripeError answers Stripe's error body.
func stripeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"type": typ, "message": msg}})
}

// stripeAuthorized checks the Bearer secret key as Stripe does (401 otherwise).
func (s *Server) stripeAuthorized(w http.ResponseWriter, r *http.Request) bool {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error",
			"You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').")
		return false
	}
	if _, ok := s.findMerchant(func(m merchantKeys) bool { return m.StripeSecretKey != "" && m.StripeSecretKey == key }); !ok {
		masked := key
		if len(key) > 12 {
			masked = key[:8] + "****" + key[len(key)-4:]
		}
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "Invalid API Key provided: "+masked)
		return false
	}
	return true
}

// stripeTxn is one balance transaction.
type stripeTxn struct {
	id, typ, category, currency string
	created, availableOn        time.Time
	amount, fee                 int64
	source                      string // ch_…, re_… or po_…
	payout                      string // the payout that pays it out (even before it arrives)
	charge                      Charge
	refund                      *Refund
	po                          *stripePayout
}

type stripePayout struct {
	id, currency string
	amount       int64
	arrival      time.Time
}

// stripeLedger is every balance transaction and payout, from the state.
func (s *Server) stripeLedger() ([]stripeTxn, []stripePayout) {
	s.mu.Lock()
	var entries []entry
	stripe := func(c Charge) bool { return c.Channel == "" || c.Channel == string(FormatStripe) } // see entries
	for _, c := range s.st.Charges {
		if c.Status == StatusSucceeded && stripe(c.Charge) {
			entries = append(entries, entry{at: c.CreatedAt.UTC(), charge: c.Charge})
		}
	}
	for _, r := range s.st.Refunds {
		if c, ok := s.st.byID[r.ChargeID]; ok && stripe(c.Charge) {
			rf := r.Refund
			entries = append(entries, entry{at: r.CreatedAt.UTC(), charge: c.Charge, refund: &rf})
		}
	}
	s.mu.Unlock()
	type dayCur struct{ date, cur string }
	net := map[dayCur]int64{}
	var txns []stripeTxn
	for _, e := range entries {
		dayStart := time.Date(e.at.Year(), e.at.Month(), e.at.Day(), 0, 0, 0, 0, time.UTC)
		t := stripeTxn{created: e.at, availableOn: dayStart.AddDate(0, 0, 2), currency: e.charge.Currency, charge: e.charge}
		if e.refund != nil {
			t.id, t.typ, t.category, t.amount, t.source, t.refund = "txn_"+strings.TrimPrefix(e.refund.ID, "re_"), "refund", "refund",
				-e.refund.AmountMinor, e.refund.ID, e.refund
		} else {
			t.id, t.typ, t.category, t.amount, t.fee, t.source = "txn_"+strings.TrimPrefix(e.charge.ID, "ch_"), "charge", "charge",
				e.charge.AmountMinor, s.fee(e), e.charge.ID
		}
		k := dayCur{dayStart.Format("2006-01-02"), t.currency}
		net[k] += t.amount - t.fee
		t.payout = s.payoutID(k.date, k.cur)
		txns = append(txns, t)
	}
	var payouts []stripePayout
	for k, n := range net {
		if n <= 0 {
			continue // nothing to pay out: the day's transactions wait in the balance
		}
		d, _ := time.Parse("2006-01-02", k.date)
		po := stripePayout{id: s.payoutID(k.date, k.cur), currency: k.cur, amount: n, arrival: d.AddDate(0, 0, 2)}
		payouts = append(payouts, po)
		txns = append(txns, stripeTxn{id: "txn_" + strings.TrimPrefix(po.id, "po_"), typ: "payout", category: "payout",
			currency: k.cur, created: po.arrival, availableOn: po.arrival, amount: -n, source: po.id, payout: po.id, po: &po})
	}
	paid := map[string]bool{}
	for _, po := range payouts {
		paid[po.id] = true
	}
	for i := range txns {
		if !paid[txns[i].payout] {
			txns[i].payout = "" // a day with nothing to pay out
		}
	}
	return txns, payouts
}

// payoutID is the automatic payout of one UTC day and currency (the statement export's too).
func (s *Server) payoutID(date, currency string) string {
	return "po_" + sha256Sum([]byte(fmt.Sprintf("paysim|%d|payout|%s|%s", s.cfg.Seed, date, currency)))[:24]
}

// unixRange reads name[gte], name[gt], name[lte], name[lt] (and name=exact) as bounds.
func unixRange(q url.Values, name string) func(time.Time) bool {
	bound := func(op string) (int64, bool) {
		v := q.Get(name + "[" + op + "]")
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return func(t time.Time) bool {
		u := t.Unix()
		if n, ok := bound("gte"); ok && u < n {
			return false
		}
		if n, ok := bound("gt"); ok && u <= n {
			return false
		}
		if n, ok := bound("lte"); ok && u > n {
			return false
		}
		if n, ok := bound("lt"); ok && u >= n {
			return false
		}
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			return err == nil && u == n
		}
		return true
	}
}

// expanded says whether expand[] (or expand[N]) names field.
func expanded(q url.Values, field string) bool {
	for k, vs := range q {
		if strings.HasPrefix(k, "expand[") {
			for _, v := range vs {
				if v == field {
					return true
				}
			}
		}
	}
	return false
}

// stripePage answers one page of a list, newest first, after starting_after.
func stripePage(w http.ResponseWriter, r *http.Request, path string, ids []string, objects []any) {
	limit := 10
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "Invalid integer: limit must be between 1 and 100")
			return
		}
		limit = n
	}
	start := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		start = -1
		for i, id := range ids {
			if id == after {
				start = i + 1
			}
		}
		if start < 0 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "No such object: "+after)
			return
		}
	}
	end := min(start+limit, len(objects))
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": path, "has_more": end < len(objects), "data": objects[start:end]})
}

// newestFirst sorts by time descending, then id descending (Stripe's list order).
func newestFirst[T any](xs []T, at func(T) time.Time, id func(T) string) {
	sort.Slice(xs, func(i, j int) bool {
		if !at(xs[i]).Equal(at(xs[j])) {
			return at(xs[i]).After(at(xs[j]))
		}
		return id(xs[i]) > id(xs[j])
	})
}

// getStripePayouts handles GET /v1/payouts: payouts that have arrived.
func (s *Server) getStripePayouts(w http.ResponseWriter, r *http.Request) {
	if !s.stripeAuthorized(w, r) {
		return
	}
	q := r.URL.Query()
	arrival, created := unixRange(q, "arrival_date"), unixRange(q, "created")
	_, payouts := s.stripeLedger()
	now := s.cfg.Now()
	var out []stripePayout
	for _, po := range payouts {
		if !po.arrival.After(now) && arrival(po.arrival) && created(po.arrival) {
			out = append(out, po)
		}
	}
	newestFirst(out, func(p stripePayout) time.Time { return p.arrival }, func(p stripePayout) string { return p.id })
	ids, objs := make([]string, len(out)), make([]any, len(out))
	for i, po := range out {
		ids[i], objs[i] = po.id, stripePayoutObject(po)
	}
	stripePage(w, r, "/v1/payouts", ids, objs)
}

func stripePayoutObject(po stripePayout) map[string]any {
	return map[string]any{"id": po.id, "object": "payout", "amount": po.amount, "arrival_date": po.arrival.Unix(),
		"created": po.arrival.Unix(), "currency": strings.ToLower(po.currency), "status": "paid", "automatic": true,
		"type": "bank_account", "method": "standard", "balance_transaction": "txn_" + strings.TrimPrefix(po.id, "po_")}
}

func stripeChargeObject(c Charge) map[string]any {
	return map[string]any{"id": c.ID, "object": "charge", "amount": c.AmountMinor, "currency": strings.ToLower(c.Currency),
		"status": "succeeded", "paid": true, "created": c.CreatedAt.Unix(), "description": c.Description,
		"payment_intent": "pi_" + strings.TrimPrefix(c.ID, "ch_"), "metadata": map[string]string{"order_no": c.MerchantOrderNo},
		"amount_refunded": c.RefundedMinor}
}

func stripeRefundObject(rf *Refund) map[string]any {
	return map[string]any{"id": rf.ID, "object": "refund", "amount": rf.AmountMinor, "currency": strings.ToLower(rf.Currency),
		"charge": rf.ChargeID, "payment_intent": "pi_" + strings.TrimPrefix(rf.ChargeID, "ch_"), "status": "succeeded",
		"created": rf.CreatedAt.Unix(), "reason": nil, "metadata": map[string]string{"refund_no": rf.MerchantRefundNo}}
}

// getStripeBalanceTransactions handles GET /v1/balance_transactions (payout=, created[…]=,
// type=, expand[]=data.source).
func (s *Server) getStripeBalanceTransactions(w http.ResponseWriter, r *http.Request) {
	if !s.stripeAuthorized(w, r) {
		return
	}
	q := r.URL.Query()
	created := unixRange(q, "created")
	txns, payouts := s.stripeLedger()
	now := s.cfg.Now()
	if po := q.Get("payout"); po != "" {
		found := false
		for _, p := range payouts {
			found = found || (p.id == po && !p.arrival.After(now))
		}
		if !found {
			stripeError(w, http.StatusNotFound, "invalid_request_error", "No such payout: '"+po+"'")
			return
		}
	}
	expand := expanded(q, "data.source")
	var out []stripeTxn
	for _, t := range txns {
		if t.typ == "payout" && t.created.After(now) {
			continue // a payout that has not arrived has no balance transaction yet
		}
		if !created(t.created) || (q.Get("payout") != "" && t.payout != q.Get("payout")) || (q.Get("type") != "" && t.typ != q.Get("type")) {
			continue
		}
		out = append(out, t)
	}
	newestFirst(out, func(t stripeTxn) time.Time { return t.created }, func(t stripeTxn) string { return t.id })
	ids, objs := make([]string, len(out)), make([]any, len(out))
	for i, t := range out {
		status := "available"
		if t.availableOn.After(now) {
			status = "pending"
		}
		var source any = t.source
		if expand {
			switch {
			case t.po != nil:
				source = stripePayoutObject(*t.po)
			case t.refund != nil:
				source = stripeRefundObject(t.refund)
			default:
				source = stripeChargeObject(t.charge)
			}
		}
		ids[i] = t.id
		objs[i] = map[string]any{"id": t.id, "object": "balance_transaction", "amount": t.amount, "fee": t.fee, "net": t.amount - t.fee,
			"currency": strings.ToLower(t.currency), "created": t.created.Unix(), "available_on": t.availableOn.Unix(),
			"reporting_category": t.category, "type": t.typ, "status": status, "source": source, "description": t.charge.Description}
	}
	stripePage(w, r, "/v1/balance_transactions", ids, objs)
}

// getStripeCharge handles GET /v1/charges/{id}.
func (s *Server) getStripeCharge(w http.ResponseWriter, r *http.Request) {
	if !s.stripeAuthorized(w, r) {
		return
	}
	s.mu.Lock()
	c, ok := s.st.byID[r.PathValue("id")]
	var charge Charge
	if ok {
		charge = c.Charge
	}
	s.mu.Unlock()
	if !ok {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "No such charge: '"+r.PathValue("id")+"'")
		return
	}
	writeJSON(w, http.StatusOK, stripeChargeObject(charge))
}
