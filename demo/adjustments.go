package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/money"
)

// OperationAdjust is the demo's local-only operation: a manual adjustment of the tenant's
// balance. Everything it does is rows in this database, so it runs on the one-commit path
// (httpidem.Local → claim.Store.RunLocal): claim, adjustment row, balance and completion in one
// transaction.
const OperationAdjust = "balance.adjust"

// AdjustRoute is POST /v1/balance/adjustments' idempotency route.
var AdjustRoute = httpidem.Route{Operation: OperationAdjust,
	Intent: claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency"}}

// adjustBody is the POST /v1/balance/adjustments body: a signed amount (negative: a debit).
type adjustBody struct {
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
}

// validateAdjustment refuses a bad body before anything is claimed.
func validateAdjustment(raw []byte) error {
	var b struct {
		AmountMinor *json.Number `json:"amount_minor"`
		Currency    *string      `json:"currency"`
		Reason      *string      `json:"reason"`
	}
	if err := decodeBody(raw, &b, "amount_minor, currency and reason"); err != nil {
		return err
	}
	if b.AmountMinor == nil {
		return httpidem.Refuse("amount_minor", "is required")
	}
	if n, err := b.AmountMinor.Int64(); err != nil || n == 0 {
		return httpidem.Refuse("amount_minor", "must be a non-zero integer (minor units; negative debits)")
	}
	if b.Currency == nil || !money.Known(strings.ToUpper(*b.Currency)) {
		return httpidem.Refuse("currency", "must be an ISO 4217 code")
	}
	if b.Reason == nil || strings.TrimSpace(*b.Reason) == "" || len(*b.Reason) > 500 {
		return httpidem.Refuse("reason", "is required (at most 500 bytes)")
	}
	return nil
}

// adjust is the operation's whole work, in the transaction that claims and completes the key:
// the adjustment row and the guarded balance move. A debit beyond the balance is the business
// outcome (409 insufficient-balance), recorded and replayed; any other error rolls everything
// back, the key included.
func adjust(ctx context.Context, tx *gorm.DB, l *claim.Lease) (*claim.Snapshot, error) {
	var b adjustBody
	if err := json.Unmarshal(l.Intent, &b); err != nil {
		return nil, fmt.Errorf("adjustment body: %w", err)
	}
	currency := strings.ToUpper(b.Currency)
	err := MoveBalance(ctx, tx, l.Tenant, currency, b.AmountMinor)
	if errors.Is(err, ErrInsufficientBalance) {
		return nil, claim.FinalFailure("insufficient_balance", err.Error(), httpidem.ProblemSnapshot(httpidem.Problem{
			Type: "/problems/insufficient-balance", Title: "Insufficient balance", Status: http.StatusConflict,
			Detail: fmt.Sprintf("a debit of %s %s exceeds the balance", money.Format(-b.AmountMinor, currency), currency)}, ""))
	}
	if err != nil {
		return nil, err
	}
	var id int64
	if err := tx.WithContext(ctx).Raw(`INSERT INTO demo_balance_adjustments (tenant, key_id, amount_minor, currency, reason)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, l.Tenant, l.KeyID, b.AmountMinor, currency, strings.TrimSpace(b.Reason)).Scan(&id).Error; err != nil {
		return nil, fmt.Errorf("adjustment row: %w", err)
	}
	var balance int64
	if err := tx.WithContext(ctx).Raw(`SELECT balance_minor FROM demo_balances WHERE id = ?`, l.Tenant+"|"+currency).Scan(&balance).Error; err != nil {
		return nil, fmt.Errorf("balance: %w", err)
	}
	adj := fmt.Sprintf("adj_%d", id)
	body, _ := json.Marshal(map[string]any{"adjustment_id": adj, "amount_minor": b.AmountMinor, "currency": currency,
		"balance_minor": balance})
	return &claim.Snapshot{Status: http.StatusCreated, Body: body, ResourceID: adj,
		Headers: map[string]string{"Content-Type": "application/json"}}, nil
}
