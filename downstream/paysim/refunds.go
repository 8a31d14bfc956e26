package paysim

import (
	"net/http"
)

// RefundRequest is the body of POST /charges/{merchant_order_no}/refunds.
type RefundRequest struct {
	AmountMinor int64  `json:"amount_minor"`
	Reason      string `json:"reason,omitempty"`
}

// createRefund handles POST /charges/{key}/refunds, idempotent on its own Idempotency-Key (the
// merchant refund number) within the charge.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	order := r.PathValue("key")
	rkey := r.Header.Get(HeaderIdempotencyKey)
	if err := validKey(HeaderIdempotencyKey, rkey); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error()+" (refunds require one)")
		return
	}
	var req RefundRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, bodyStatus(err), "invalid_request", err.Error())
		return
	}
	switch {
	case req.AmountMinor <= 0 || req.AmountMinor > maxAmountMinor:
		writeError(w, http.StatusBadRequest, "invalid_request", "amount_minor: must be positive")
		return
	case len(req.Reason) > 256:
		writeError(w, http.StatusBadRequest, "invalid_request", "reason: longer than 256 characters")
		return
	}
	f, err := s.decideFaults(r, "refund", order+"\x00"+rkey)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f.wait(r)
	if f.err {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "paysim injected a failure; nothing was refunded")
		return
	}
	fp := fingerprint(req)

	s.mu.Lock()
	if prev, ok := s.st.refundKey[order+"\x00"+rkey]; ok {
		same, rf := prev.Fingerprint == fp, prev.Refund
		s.mu.Unlock()
		switch {
		case !same:
			writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
				"this Idempotency-Key was used with a different refund")
		case f.drop:
			dropResponse(w)
		default:
			w.Header().Set(HeaderReplayed, "true")
			writeJSON(w, http.StatusOK, rf)
		}
		return
	}
	status, code, msg := s.refundable(order, req.AmountMinor)
	if status != 0 {
		s.mu.Unlock()
		writeError(w, status, code, msg)
		return
	}
	c := s.firstSucceeded(order)
	c.RefundedMinor += req.AmountMinor
	rec := &refundRecord{Fingerprint: fp, Refund: Refund{
		ID: s.st.newID(s.cfg.Seed, "re_"), ChargeID: c.ID, MerchantOrderNo: order, MerchantRefundNo: rkey,
		Status: StatusSucceeded, AmountMinor: req.AmountMinor, Currency: c.Currency, Reason: req.Reason,
		CreatedAt: s.cfg.Now().UTC(),
	}}
	s.st.Refunds = append(s.st.Refunds, rec)
	s.st.refundKey[order+"\x00"+rkey] = rec
	s.emitCallback(f, CallbackEvent{Type: EventRefunded, MerchantOrderNo: order, ChargeID: c.ID, RefundID: rec.ID,
		AmountMinor: rec.AmountMinor, Currency: rec.Currency})
	s.changed()
	s.mu.Unlock()

	if f.drop {
		dropResponse(w)
		return
	}
	writeJSON(w, http.StatusCreated, rec.Refund)
}

// refundable says why a refund of amount on order cannot happen (status 0: it can); callers
// hold s.mu.
func (s *Server) refundable(order string, amount int64) (int, string, string) {
	switch c := s.firstSucceeded(order); {
	case len(s.st.byOrder[order]) == 0:
		return http.StatusNotFound, "not_found", "no charge for this merchant order number"
	case c == nil:
		return http.StatusConflict, "charge_not_refundable", "the charge did not succeed"
	case len(s.st.Refunds) >= s.cfg.MaxRefunds:
		return http.StatusServiceUnavailable, "state_full", "paysim holds its maximum number of refunds"
	case amount > c.AmountMinor-c.RefundedMinor:
		return http.StatusConflict, "amount_exceeds_refundable", "amount_minor: exceeds what is left to refund"
	}
	return 0, "", ""
}

// firstSucceeded is the order's first succeeded charge, the one refunds apply to.
func (s *Server) firstSucceeded(order string) *chargeRecord {
	for _, c := range s.st.byOrder[order] {
		if c.Status == StatusSucceeded {
			return c
		}
	}
	return nil
}
