package retention

import (
	"context"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// ExpiryPolicies returns the policies in force, in the form claim takes them: what a service
// publishes to its callers as its key retention (httpidem.Config.Retention).
func ExpiryPolicies(ctx context.Context, db *gorm.DB) ([]claim.ExpiryPolicy, error) {
	set, err := ListPolicies(ctx, db)
	if err != nil {
		return nil, err
	}
	return set.expiryPolicies(), nil
}
