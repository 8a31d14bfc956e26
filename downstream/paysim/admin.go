package paysim

import (
	"net/http"
	"strings"
	"time"
)

// ChargeList answers GET /_paysim/charges: every charge the channel holds for one merchant
// order number, oldest first.
type ChargeList struct {
	MerchantOrderNo string   `json:"merchant_order_no"`
	Count           int      `json:"count"`
	Charges         []Charge `json:"charges"`
}

// adminListCharges handles GET /_paysim/charges?merchant_order_no=X, the "exactly one charge"
// check of tests and the demo.
func (s *Server) adminListCharges(w http.ResponseWriter, r *http.Request) {
	order := r.URL.Query().Get("merchant_order_no")
	if order == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "merchant_order_no: required query parameter")
		return
	}
	s.mu.Lock()
	out := ChargeList{MerchantOrderNo: order, Charges: []Charge{}}
	for _, c := range s.st.byOrder[order] {
		out.Charges = append(out.Charges, c.Charge)
	}
	s.mu.Unlock()
	out.Count = len(out.Charges)
	writeJSON(w, http.StatusOK, out)
}

// ChannelCharge is the body of POST /_paysim/charges: a charge the channel reports although
// the merchant never asked for it (a CHANNEL_ONLY finding). Status defaults to succeeded and
// CreatedAt to the channel's clock.
type ChannelCharge struct {
	AmountMinor     int64      `json:"amount_minor"`
	Currency        string     `json:"currency"`
	MerchantOrderNo string     `json:"merchant_order_no"`
	Payee           string     `json:"payee,omitempty"`
	Description     string     `json:"description,omitempty"`
	Status          string     `json:"status,omitempty"`
	CreatedAt       *time.Time `json:"created_at,omitempty"`
	// Channel is the channel whose statements list it (see ChargeRequest.Channel).
	Channel string `json:"channel,omitempty"`
}

// adminInsertCharge handles POST /_paysim/charges. No faults, no idempotency: it fabricates.
func (s *Server) adminInsertCharge(w http.ResponseWriter, r *http.Request) {
	var in ChannelCharge
	if err := decodeBody(w, r, &in); err != nil {
		writeError(w, bodyStatus(err), "invalid_request", err.Error())
		return
	}
	req := ChargeRequest{AmountMinor: in.AmountMinor, Currency: in.Currency, MerchantOrderNo: in.MerchantOrderNo,
		Payee: in.Payee, Description: in.Description, Channel: in.Channel}
	if err := req.normalize(""); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if in.Status == "" {
		in.Status = StatusSucceeded
	}
	if in.Status != StatusSucceeded && in.Status != StatusFailed {
		writeError(w, http.StatusBadRequest, "invalid_request", "status: must be succeeded or failed")
		return
	}
	s.mu.Lock()
	if len(s.st.Charges) >= s.cfg.MaxCharges {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "state_full", "paysim holds its maximum number of charges")
		return
	}
	c := s.newCharge(req)
	c.Status, c.FailureCode = in.Status, ""
	if in.Status == StatusFailed {
		c.FailureCode = "declined"
	}
	if in.CreatedAt != nil {
		c.CreatedAt = in.CreatedAt.UTC()
	}
	rec := &chargeRecord{Charge: c, Origin: originAdmin}
	s.st.Charges = append(s.st.Charges, rec)
	s.st.indexCharge(rec)
	s.changed()
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, c)
}

// ChargeChange is the body of PATCH /_paysim/charges/{id}: what the channel now reports for a
// charge (an AMOUNT_, CURRENCY_ or STATUS_MISMATCH finding). Nil fields stay as they are.
type ChargeChange struct {
	AmountMinor *int64  `json:"amount_minor,omitempty"`
	Currency    *string `json:"currency,omitempty"`
	Status      *string `json:"status,omitempty"`
}

// adminAlterCharge handles PATCH /_paysim/charges/{id}.
func (s *Server) adminAlterCharge(w http.ResponseWriter, r *http.Request) {
	var ch ChargeChange
	if err := decodeBody(w, r, &ch); err != nil {
		writeError(w, bodyStatus(err), "invalid_request", err.Error())
		return
	}
	if ch.AmountMinor != nil && (*ch.AmountMinor <= 0 || *ch.AmountMinor > maxAmountMinor) {
		writeError(w, http.StatusBadRequest, "invalid_request", "amount_minor: must be positive")
		return
	}
	if ch.Currency != nil {
		cur := strings.ToUpper(*ch.Currency)
		if _, ok := currencyExponent(cur); !ok {
			writeError(w, http.StatusBadRequest, "invalid_request", "currency: not a currency paysim settles")
			return
		}
		ch.Currency = &cur
	}
	if ch.Status != nil && *ch.Status != StatusSucceeded && *ch.Status != StatusFailed {
		writeError(w, http.StatusBadRequest, "invalid_request", "status: must be succeeded or failed")
		return
	}
	s.mu.Lock()
	c, ok := s.st.byID[r.PathValue("id")]
	if !ok {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "not_found", "no charge with this id")
		return
	}
	if ch.AmountMinor != nil {
		c.AmountMinor = *ch.AmountMinor
	}
	if ch.Currency != nil {
		c.Currency = *ch.Currency
	}
	if ch.Status != nil {
		c.Status, c.FailureCode = *ch.Status, ""
		if c.Status == StatusFailed {
			c.FailureCode = "declined"
		}
	}
	out := c.Charge
	s.changed()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}
