package demo

import (
	"context"
	"errors"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/downstream/paysim"
)

// ReceiptSender delivers the receipt notifications the payments service stages in the outbox
// (operation receipt.notify) to paysim, which dedupes them by the downstream key.
type ReceiptSender struct{ Client *paysim.Client }

// Send posts one notification under its downstream key. A rejected payload will never succeed:
// it is a permanent error (the row fails at once instead of being retried).
func (s ReceiptSender) Send(ctx context.Context, downstreamKey string, payload []byte) error {
	_, err := s.Client.Notify(ctx, downstreamKey, payload)
	if errors.Is(err, paysim.ErrRejected) || errors.Is(err, paysim.ErrKeyReused) {
		return daemon.Permanent(err)
	}
	return err
}

// Lookup says whether paysim already has the notification (asked before a resend).
func (s ReceiptSender) Lookup(ctx context.Context, downstreamKey string) (bool, error) {
	_, err := s.Client.GetNotification(ctx, downstreamKey)
	if errors.Is(err, paysim.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Senders are the outbox senders of the demo world.
func (w *World) Senders() daemon.SenderMap {
	m := daemon.SenderMap{OperationReceipt: ReceiptSender{Client: w.Client}}
	if w.events != nil {
		m[OperationPaymentEvent] = w.events
	}
	if w.ledger != nil {
		m[OperationLedgerPost] = *w.ledger
	}
	return m
}
