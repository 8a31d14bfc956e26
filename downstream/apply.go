package downstream

import (
	"context"
	"encoding/json"
	"net/http"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// ApplyFunc writes a service's business rows for a downstream document in tx (the transaction
// that completes the key) and returns the response snapshot to replay. Operations take one to
// replace their default, which only builds the snapshot.
type ApplyFunc func(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error)

// JSONSnapshot is the small response a key replays: HTTP status, Content-Type
// application/json, and {"resource_id": …, "status": …}.
func JSONSnapshot(status int, resourceID, docStatus string) *claim.Snapshot {
	body, _ := json.Marshal(struct {
		ResourceID string `json:"resource_id"`
		Status     string `json:"status"`
	}{resourceID, docStatus})
	return &claim.Snapshot{
		Status:     status,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       body,
		ResourceID: resourceID,
	}
}

// defaultApplyStatus is the status a completed key replays by default: the resource was created.
const defaultApplyStatus = http.StatusCreated
