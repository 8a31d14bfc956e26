package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
)

// OperationLedgerPost is the outbox operation that posts a completed payment to an external
// ledger with no idempotency of its own: each POST is a new entry. The relay must ask before any
// resend (LedgerSender is a daemon.Looker) and never post twice.
const OperationLedgerPost = "ledger.post"

// LedgerHeaderKey carries the downstream key on a ledger POST; the ledger stores it with the
// entry, so that a lookup by it can find the entry, but does not dedupe on it.
const LedgerHeaderKey = "Ledger-Reference"

// LedgerSender posts ledger entries to URL (POST URL/entries; GET URL/entries/{reference}).
type LedgerSender struct {
	URL  string
	HTTP *http.Client
}

// Send posts one entry: 2xx is done, 4xx permanent, anything else (a timeout too) unknown.
func (s LedgerSender) Send(ctx context.Context, downstreamKey string, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/entries", bytes.NewReader(payload))
	if err != nil {
		return daemon.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(LedgerHeaderKey, downstreamKey)
	res, err := s.client().Do(req)
	if err != nil {
		return fmt.Errorf("ledger post: %w", err)
	}
	res.Body.Close()
	switch {
	case res.StatusCode/100 == 2:
		return nil
	case res.StatusCode/100 == 4:
		return daemon.Permanent(fmt.Errorf("ledger post: status %d", res.StatusCode))
	}
	return fmt.Errorf("ledger post: status %d", res.StatusCode)
}

// Lookup asks whether the ledger holds an entry under downstreamKey: 200 yes, 404 no.
func (s LedgerSender) Lookup(ctx context.Context, downstreamKey string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/entries/"+url.PathEscape(downstreamKey), nil)
	if err != nil {
		return false, err
	}
	res, err := s.client().Do(req)
	if err != nil {
		return false, fmt.Errorf("ledger lookup: %w", err)
	}
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("ledger lookup: status %d", res.StatusCode)
}

func (s LedgerSender) client() *http.Client {
	if s.HTTP != nil {
		return s.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// EnqueueLedgerPost stages the ledger entry of a completed payment in tx, the transaction that
// completes its key.
func EnqueueLedgerPost(ctx context.Context, tx *gorm.DB, l *claim.Lease, paymentID string) error {
	var amount int64
	if l.Amount != nil {
		amount = *l.Amount
	}
	body, _ := json.Marshal(map[string]any{"payment_id": paymentID, "amount_minor": amount, "currency": l.Currency})
	return claim.Enqueue(ctx, tx, claim.OutboxMessage{KeyID: l.KeyID, Operation: OperationLedgerPost,
		DownstreamKey: claim.DownstreamKey(l.Tenant, OperationLedgerPost, l.Key), Payload: body})
}
