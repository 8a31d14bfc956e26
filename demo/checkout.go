package demo

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim/httpidem"
)

// CheckoutHandler offers the charge with one-time tokens: POST /v1/checkout/tokens issues a
// token for the tenant (10 min TTL); POST /v1/checkout takes the charge body with the token in
// Idempotency-Token (or an ordinary Idempotency-Key) and runs the same payment.charge operation
// as POST /v1/payments. A tenant's tokens live in its cell when the service routes by tenant.
func (s *Service) CheckoutHandler() http.Handler {
	cfg := s.idem()
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/v1/checkout/tokens", s.withTokens(func(t *httpidem.Tokens) gin.HandlerFunc { return httpidem.IssueTokenHandler(cfg, t) }))
	r.POST("/v1/checkout", s.withTokens(func(t *httpidem.Tokens) gin.HandlerFunc { return httpidem.AcceptToken(cfg, t) }),
		httpidem.Handler(cfg, s.charge, validateCharge))
	return r
}

// withTokens runs the handler made on the tokens of the caller's tenant's database. Without
// routing, and for a caller the handler itself refuses (no credential), that is the service's
// database; a tenant with no cell is refused here (503), before any token is read or issued.
func (s *Service) withTokens(h func(*httpidem.Tokens) gin.HandlerFunc) gin.HandlerFunc {
	tokensOn := func(db *gorm.DB) *httpidem.Tokens { return &httpidem.Tokens{DB: db, Operation: s.charge.Name()} }
	own := h(tokensOn(s.db))
	if s.stores == nil {
		return own
	}
	return func(c *gin.Context) {
		tenant, err := s.tenant(c)
		if err != nil {
			own(c) // answers 401
			return
		}
		db, err := s.dbOf(tenant)
		if err != nil {
			writeProblem(c, http.StatusServiceUnavailable, "tenant-unavailable", "Unavailable for this caller", "this service cannot take requests for your credential now")
			c.Abort()
			return
		}
		h(tokensOn(db))(c)
	}
}
