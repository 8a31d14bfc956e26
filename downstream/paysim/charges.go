package paysim

import (
	"net/http"
	"slices"
	"strings"
)

// ChargeRequest is the body of POST /charges.
type ChargeRequest struct {
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// MerchantOrderNo is the downstream key; with an Idempotency-Key header it may be omitted
	// (it defaults to the key) and must otherwise equal it.
	MerchantOrderNo string `json:"merchant_order_no"`
	Payee           string `json:"payee,omitempty"`
	Description     string `json:"description,omitempty"`
	// Channel is the channel the merchant charges through (wechat, alipay, stripe, adyen: the
	// names of the statement formats): only that channel's statements list the charge. Empty:
	// a charge of no channel in particular, listed as before channels were told apart (the
	// WeChat Pay and Alipay bills list it when it is in CNY, Stripe's and Adyen's always).
	Channel string `json:"channel,omitempty"`
}

// normalize validates req, upper-cases the currency and fills the order number from key.
func (req *ChargeRequest) normalize(key string) error {
	req.Currency = strings.ToUpper(strings.TrimSpace(req.Currency))
	if req.MerchantOrderNo == "" {
		req.MerchantOrderNo = key
	}
	switch {
	case req.AmountMinor <= 0 || req.AmountMinor > maxAmountMinor:
		return badf("amount_minor: must be between 1 and %d minor units", int64(maxAmountMinor))
	case req.Currency == "":
		return badf("currency: required")
	}
	if _, ok := currencyExponent(req.Currency); !ok {
		return badf("currency: %q is not a currency paysim settles", req.Currency)
	}
	if req.MerchantOrderNo == "" {
		return badf("merchant_order_no: required when no %s header is sent", HeaderIdempotencyKey)
	}
	if err := validKey("merchant_order_no", req.MerchantOrderNo); err != nil {
		return err
	}
	if key != "" && req.MerchantOrderNo != key {
		return badf("merchant_order_no: must equal the %s header", HeaderIdempotencyKey)
	}
	switch {
	case len(req.Payee) > 128:
		return badf("payee: longer than 128 characters")
	case len(req.Description) > 256:
		return badf("description: longer than 256 characters")
	}
	if req.Channel != "" {
		if _, err := ParseFormat(req.Channel); err != nil {
			return badf("channel: %q is not wechat, alipay, stripe or adyen", req.Channel)
		}
	}
	return nil
}

// createCharge handles POST /charges: idempotent on the Idempotency-Key header; without one
// every call is a new charge (and, with the double-charge fault, two).
func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(HeaderIdempotencyKey)
	if key != "" {
		if err := validKey(HeaderIdempotencyKey, key); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
	}
	var req ChargeRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, bodyStatus(err), "invalid_request", err.Error())
		return
	}
	if err := req.normalize(key); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f, err := s.decideFaults(r, "charge", req.MerchantOrderNo)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f.wait(r)
	if f.err {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "paysim injected a failure; nothing was charged")
		return
	}
	fp := fingerprint(req)

	s.mu.Lock()
	if key != "" {
		if prev, ok := s.st.byKey[key]; ok {
			same := prev.Fingerprint == fp
			c := prev.Charge
			s.mu.Unlock()
			if !same {
				writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
					"this Idempotency-Key was used with a different request")
				return
			}
			if f.drop {
				dropResponse(w)
				return
			}
			w.Header().Set(HeaderReplayed, "true")
			writeJSON(w, http.StatusOK, c)
			return
		}
	}
	n := 1
	if key == "" && f.doubleCharge {
		n = 2
	}
	if len(s.st.Charges)+n > s.cfg.MaxCharges {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "state_full", "paysim holds its maximum number of charges")
		return
	}
	var first Charge
	for i := 0; i < n; i++ {
		rec := &chargeRecord{Charge: s.newCharge(req), IdempotencyKey: key, Fingerprint: fp, Origin: originAPI}
		if i == 1 {
			rec.Origin = originDouble
		}
		s.st.Charges = append(s.st.Charges, rec)
		s.st.indexCharge(rec)
		if i == 0 {
			first = rec.Charge
		}
	}
	if first.Status == StatusSucceeded { // a decline is answered synchronously; no callback
		s.emitCallback(f, CallbackEvent{Type: EventSucceeded, MerchantOrderNo: first.MerchantOrderNo, ChargeID: first.ID,
			AmountMinor: first.AmountMinor, Currency: first.Currency})
	}
	s.changed()
	s.mu.Unlock()

	if f.drop {
		dropResponse(w)
		return
	}
	writeJSON(w, http.StatusCreated, first)
}

// newCharge builds a charge for req, declined when a configured payee or amount says so;
// callers hold s.mu.
func (s *Server) newCharge(req ChargeRequest) Charge {
	c := Charge{
		ID: s.st.newID(s.cfg.Seed, "ch_"), Status: StatusSucceeded, AmountMinor: req.AmountMinor,
		Currency: req.Currency, MerchantOrderNo: req.MerchantOrderNo, Payee: req.Payee,
		Description: req.Description, Channel: req.Channel, CreatedAt: s.cfg.Now().UTC(),
	}
	if slices.Contains(s.cfg.DeclinePayees, req.Payee) || slices.Contains(s.cfg.DeclineAmounts, req.AmountMinor) {
		c.Status, c.FailureCode = StatusFailed, "declined"
	}
	return c
}

// getCharge handles GET /charges/{key}: the first charge for that merchant order number.
func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	f, err := s.decideFaults(r, "lookup", key)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f.wait(r)
	if f.err {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "paysim injected a failure")
		return
	}
	s.mu.Lock()
	cs := s.st.byOrder[key]
	var c Charge
	if len(cs) > 0 {
		c = cs[0].Charge
	}
	s.mu.Unlock()
	if len(cs) == 0 {
		writeError(w, http.StatusNotFound, "not_found", "no charge for this merchant order number")
		return
	}
	writeJSON(w, http.StatusOK, c)
}
