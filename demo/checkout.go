package demo

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim/httpidem"
)

// CheckoutHandler offers the charge with one-time tokens: POST /v1/checkout/tokens issues a
// token for the tenant (10 min TTL); POST /v1/checkout takes the charge body with the token in
// Idempotency-Token (or an ordinary Idempotency-Key) and runs the same payment.charge operation
// as POST /v1/payments.
func (s *Service) CheckoutHandler() http.Handler {
	tokens := &httpidem.Tokens{DB: s.db, Operation: s.charge.Name()}
	cfg := s.idem()
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/v1/checkout/tokens", httpidem.IssueTokenHandler(cfg, tokens))
	r.POST("/v1/checkout", httpidem.AcceptToken(cfg, tokens), httpidem.Handler(cfg, s.charge, validateCharge))
	return r
}
