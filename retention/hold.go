package retention

import (
	"context"

	"gorm.io/gorm"

	"github.com/idemops/idemops/keys"
)

// SetLegalHold puts key keyID on legal hold, or lifts it (hold false), on behalf of actor
// (operator:NAME), with reason recorded in the key's history. A key on hold is never tombstoned
// or purged. It reports whether anything changed. Errors: claim.ErrNotFound; an *errs.FieldError
// wrapping keys.ErrInvalidHold for a missing reason or an actor that is not an operator.
// Callers that serve operators check the operator may act on the key's tenant first.
func SetLegalHold(ctx context.Context, db *gorm.DB, keyID int64, hold bool, actor, reason string) (bool, error) {
	return keys.SetLegalHold(ctx, db, keyID, hold, actor, reason)
}
