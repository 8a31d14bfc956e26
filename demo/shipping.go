package demo

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream/paysim"
)

// OperationShipment is the demo's spanning consumer's operation: for each payment event it
// notifies the payee through paysim's notification endpoint (another service, idempotent by
// the downstream key), then records the shipment locally. The two cannot share a transaction,
// so the dedup record is a claim key (processing while the notification is sent, completed with
// the shipping_notices row); a consumer that dies in between is compensated by the daemon's reclaim
// job, which looks the notification up at paysim first.
const OperationShipment = "shipment.notify"

// ShipmentOperation is OperationShipment's remote part and local write.
type ShipmentOperation struct{ Client *paysim.Client }

// Name is "shipment.notify".
func (ShipmentOperation) Name() string { return OperationShipment }

// Intent: the whole event carries intent.
func (ShipmentOperation) Intent() claim.IntentSpec { return claim.IntentSpec{} }

// Redrive: once paysim has twice said "not found" a quarantine apart, the daemon may send the
// notification itself (the consumer died before sending it).
func (ShipmentOperation) Redrive() bool { return true }

// notificationDoc names the notification after the first 16 characters of its downstream key
// (all of it when shorter: a downstream key of another form must not panic here).
func notificationDoc(dk string) *claim.Document {
	return &claim.Document{ResourceID: "ntf_" + dk[:min(16, len(dk))]}
}

// Execute sends the notification under the key's downstream key.
func (o ShipmentOperation) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	if _, err := o.Client.Notify(ctx, l.DownstreamKey, l.Intent); err != nil {
		if errors.Is(err, paysim.ErrRejected) || errors.Is(err, paysim.ErrKeyReused) {
			return nil, claim.FinalFailure("notification_rejected", err.Error(), nil)
		}
		return nil, err
	}
	return notificationDoc(l.DownstreamKey), nil
}

// Lookup asks paysim whether the notification arrived.
func (o ShipmentOperation) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	_, err := o.Client.GetNotification(ctx, l.DownstreamKey)
	if errors.Is(err, paysim.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return notificationDoc(l.DownstreamKey), nil
}

// Apply records the shipment in tx, the transaction that completes the dedup record.
func (ShipmentOperation) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	var e paymentEvent
	if err := json.Unmarshal(l.Intent, &e); err != nil {
		return nil, err
	}
	if err := tx.WithContext(ctx).Exec(`INSERT INTO shipping_notices (payment_id, tenant, notification) VALUES (?, ?, ?)
		ON CONFLICT (payment_id) DO NOTHING`, e.PaymentID, l.Tenant, doc.ResourceID).Error; err != nil {
		return nil, err
	}
	return &claim.Snapshot{Status: http.StatusOK, ResourceID: doc.ResourceID}, nil
}
