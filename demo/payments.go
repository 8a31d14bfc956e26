// Package demo is the sample world `idemops demo` runs: a payments service that puts the
// Idempotency-Key contract on POST /v1/payments (httpidem + claim.Run + the paysim Operation,
// its payments row and the key committed in one transaction), and a traffic generator that
// produces what production produces — retries, concurrent duplicates, a reused key with another
// amount, and crashes between the channel call and the local commit.
package demo

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/retention"
)

// OperationCharge is the payments service's operation name.
const OperationCharge = "payment.charge"

// OperationReceipt is the outbox operation that notifies the payee of a completed payment.
const OperationReceipt = "receipt.notify"

// Payment is a row of the demo's payments table and its API shape.
type Payment struct {
	ID              string    `json:"payment_id"`
	Tenant          string    `json:"-"`
	KeyID           int64     `json:"-"`
	MerchantOrderNo string    `json:"merchant_order_no"`
	Payee           string    `json:"payee"`
	AmountMinor     int64     `json:"amount_minor"`
	Currency        string    `json:"currency"`
	Status          string    `json:"status"`
	ChannelTxnID    string    `json:"channel_txn_id,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
}

// chargeBody is the POST /v1/payments body.
type chargeBody struct {
	AmountMinor     int64  `json:"amount_minor"`
	Currency        string `json:"currency"`
	MerchantOrderNo string `json:"merchant_order_no"`
	Payee           string `json:"payee"`
	Description     string `json:"description"`
	ClientTS        string `json:"client_ts"`
}

// validateCharge refuses a charge body before anything is claimed or charged: an invalid
// parameter is not the business outcome, so the same key with a corrected body executes. A
// declined charge (paysim's verdict) is the business outcome: it fails the key and is replayed.
func validateCharge(raw []byte) error {
	var b struct {
		AmountMinor     *json.Number `json:"amount_minor"`
		Currency        *string      `json:"currency"`
		MerchantOrderNo *string      `json:"merchant_order_no"`
		Payee           *string      `json:"payee"`
	}
	if err := decodeBody(raw, &b, "amount_minor, currency and payee"); err != nil {
		return err
	}
	if b.AmountMinor == nil {
		return httpidem.Refuse("amount_minor", "is required")
	}
	n, err := b.AmountMinor.Int64()
	if err != nil || n <= 0 {
		return httpidem.Refuse("amount_minor", "must be a positive integer (minor units)")
	}
	if n > paysim.MaxAmountMinor { // refused here, as a problem, not stored as the channel's rejection
		return httpidem.Refuse("amount_minor", fmt.Sprintf("must be at most %d minor units (the channel's limit)", int64(paysim.MaxAmountMinor)))
	}
	if b.Currency == nil || !money.Known(strings.ToUpper(*b.Currency)) {
		return httpidem.Refuse("currency", "must be an ISO 4217 code")
	}
	if b.Payee == nil || strings.TrimSpace(*b.Payee) == "" {
		return httpidem.Refuse("payee", "is required")
	}
	return nil
}

// PaymentID is derived from the downstream key, so a recovery that creates the row later (the
// daemon, an operator) creates the same id the client would have got.
func PaymentID(downstreamKey string) string { return "pay_" + downstreamKey[:20] }

// ErrSimulatedCrash is what Apply returns when the demo simulates a crash between the channel
// call and the local commit: the key stays processing with a lease nobody renews.
var ErrSimulatedCrash = errors.New("simulated crash, a demo fault (expected): the channel charged, the local commit did not happen; the reclaimer will recover the key from paysim")

// crashKey marks a request whose Apply must crash (demo traffic only).
type crashKey struct{}

// ApplyPayment writes the payments row for a successful charge document and stages the
// receipt notification in the outbox, in tx (the transaction that completes the key).
func ApplyPayment(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if crash, _ := ctx.Value(crashKey{}).(*atomic.Bool); crash != nil && crash.Load() {
		return nil, ErrSimulatedCrash
	}
	var body chargeBody
	if err := json.Unmarshal(l.Intent, &body); err != nil {
		return nil, fmt.Errorf("payment intent: %w", err)
	}
	p := Payment{ID: PaymentID(l.DownstreamKey), Tenant: l.Tenant, KeyID: l.KeyID, MerchantOrderNo: body.MerchantOrderNo,
		Payee: body.Payee, AmountMinor: body.AmountMinor, Currency: strings.ToUpper(body.Currency), Status: "succeeded",
		ChannelTxnID: doc.ResourceID}
	err := tx.WithContext(ctx).Raw(`INSERT INTO payments (id, tenant, key_id, merchant_order_no, payee, amount_minor, currency, status, channel_txn_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated_at = now() RETURNING created_at`,
		p.ID, p.Tenant, p.KeyID, p.MerchantOrderNo, p.Payee, p.AmountMinor, p.Currency, p.Status, p.ChannelTxnID).Scan(&p.CreatedAt).Error
	if err != nil {
		return nil, fmt.Errorf("insert payment: %w", err)
	}
	receipt, _ := json.Marshal(map[string]any{"payment_id": p.ID, "payee": p.Payee, "amount_minor": p.AmountMinor, "currency": p.Currency})
	if err := claim.Enqueue(ctx, tx, claim.OutboxMessage{KeyID: l.KeyID, Operation: OperationReceipt,
		DownstreamKey: claim.DownstreamKey(l.Tenant, OperationReceipt, l.Key), Payload: receipt}); err != nil {
		return nil, err
	}
	resp, _ := json.Marshal(map[string]any{"payment_id": p.ID, "status": p.Status, "amount_minor": p.AmountMinor,
		"currency": p.Currency, "merchant_order_no": p.MerchantOrderNo})
	return &claim.Snapshot{Status: http.StatusCreated, Body: resp, ResourceID: p.ID,
		Headers: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/" + p.ID}}, nil
}

// Service is the demo payments API.
type Service struct {
	db      *gorm.DB
	store   *claim.Store
	charge  claim.Operation
	apiKeys map[string]string // bearer key → tenant
	answers *claim.AnswerRecorder
	// stores and answersOf route each request to its tenant's store (RouteByTenant); nil: store.
	stores    func(tenant string) (*claim.Store, error)
	answersOf func(*claim.Store) *claim.AnswerRecorder
	tracing   trace.TracerProvider // nil: not traced
	channel   *paysim.Client       // the tip's own calls (gRPC Payments/Tip)
}

// NewService builds the payments API. charge is the paysim Operation whose Apply is ApplyPayment.
func NewService(db *gorm.DB, store *claim.Store, charge claim.Operation, apiKeys map[string]string) *Service {
	return &Service{db: db, store: store, charge: charge, apiKeys: apiKeys}
}

// RouteByTenant makes the service claim every request (HTTP and gRPC) in its tenant's store, a
// deployment of cells (package cells: Set.StoreFor): a tenant with no store is refused, never
// claimed in the default store. answersOf is a store's answer recorder (nil: none recorded). A
// tenant's payments are read from its store's database. Call it before Handler or GRPCServer.
func (s *Service) RouteByTenant(stores func(tenant string) (*claim.Store, error), answersOf func(*claim.Store) *claim.AnswerRecorder) {
	s.stores, s.answersOf = stores, answersOf
}

// idem is the idempotency configuration every HTTP route of the service shares.
func (s *Service) idem() httpidem.Config {
	return httpidem.Config{Store: s.store, Stores: s.stores, AnswersOf: s.answersOf, Tenant: s.tenant, Service: "payments",
		MaxBodyBytes: 16 << 10, Answers: s.answers}
}

// dbOf is the database holding tenant's rows: its store's when the service routes by tenant.
func (s *Service) dbOf(tenant string) (*gorm.DB, error) {
	if s.stores == nil {
		return s.db, nil
	}
	store, err := s.stores(tenant)
	if err != nil {
		return nil, err
	}
	return store.DB(), nil
}

// tenant authenticates the bearer API key; the tenant never comes from the request body.
func (s *Service) tenant(c *gin.Context) (string, error) {
	tok, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok {
		return "", errors.New("no bearer token")
	}
	return s.tenantOf(tok)
}

// tenantOf returns the tenant of a bearer API key (HTTP and gRPC alike).
func (s *Service) tenantOf(tok string) (string, error) {
	for k, t := range s.apiKeys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return t, nil
		}
	}
	return "", errors.New("unknown API key")
}

// Handler is the HTTP API: POST /v1/payments and GET /v1/payments/{id}.
func (s *Service) Handler() http.Handler {
	r := gin.New()
	r.Use(gin.CustomRecovery(func(c *gin.Context, _ any) {
		writeProblem(c, http.StatusInternalServerError, "internal", "Internal error", "")
	}))
	r.NoRoute(func(c *gin.Context) { writeProblem(c, http.StatusNotFound, "not-found", "Not found", "no such route") })
	cfg := s.idem()
	cfg.Retention = func(ctx context.Context) ([]claim.ExpiryPolicy, error) { return retention.ExpiryPolicies(ctx, s.db) }
	charge := httpidem.Handler(cfg, s.charge, validateCharge)
	r.GET("/idempotency/status", httpidem.Status(cfg))                  // a key's state by key (409 points here)
	r.GET("/idempotency/policy", httpidem.Policy(cfg, OperationCharge)) // the published key policy
	r.POST("/v1/payments", func(c *gin.Context) {
		if c.GetHeader("X-Demo-Crash") == "after-charge" { // demo traffic simulates a crash
			crash := &atomic.Bool{}
			crash.Store(true)
			c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), crashKey{}, crash))
		}
		if fault := c.GetHeader(paysim.HeaderFault); fault != "" { // forwarded to the channel (demo only)
			c.Request = c.Request.WithContext(downstream.WithPaysimFault(c.Request.Context(), fault))
		}
		charge(c)
	})
	// A local-only operation on the one-commit path: claim, rows and completion in one transaction.
	r.POST("/v1/balance/adjustments", httpidem.Local(cfg, AdjustRoute, adjust, validateAdjustment))
	r.GET("/problems/:name", func(c *gin.Context) { // the docs behind every problem type
		text, ok := problemDoc(c.Param("name"))
		if !ok {
			writeProblem(c, http.StatusNotFound, "not-found", "Not found", "no such problem type")
			return
		}
		c.String(http.StatusOK, "%s\n\n%s\n", c.Param("name"), text)
	})
	r.GET("/v1/payments/:id", func(c *gin.Context) {
		tenant, err := s.tenant(c)
		if err != nil {
			writeProblem(c, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required")
			return
		}
		db, err := s.dbOf(tenant)
		if err != nil {
			writeProblem(c, http.StatusServiceUnavailable, "tenant-unavailable", "Unavailable for this caller", "this service cannot take requests for your credential now")
			return
		}
		var ps []Payment
		if err := db.WithContext(c.Request.Context()).Raw(`SELECT id, merchant_order_no, payee, amount_minor, currency, status,
			channel_txn_id, created_at FROM payments WHERE tenant = ? AND id = ?`, tenant, c.Param("id")).Scan(&ps).Error; err != nil {
			writeProblem(c, http.StatusInternalServerError, "internal", "Internal error", "")
			return
		}
		if len(ps) == 0 {
			writeProblem(c, http.StatusNotFound, "payment-not-found", "Payment not found", "no payment with this id belongs to your credential")
			return
		}
		c.JSON(http.StatusOK, ps[0])
	})
	return refuseHostileText(r)
}
