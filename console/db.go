package console

import (
	"context"

	"gorm.io/gorm"
)

// dbHandle is the gorm handle the read queries run on (a *gorm.DB; a read replica's works too).
type dbHandle interface {
	WithContext(ctx context.Context) *gorm.DB
}
