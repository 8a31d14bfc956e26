// Package pgpool opens the one pool the binary and the stores share on a PostgreSQL URL, with the
// settings the project uses everywhere (docs/ARCHITECTURE.md, "one pool").
package pgpool

import (
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// MaxConns is the pool's size, open and idle alike.
const MaxConns = 40

// Config is gorm's configuration for every handle: no implicit transactions around single
// writes, no SQL logging (queries carry keys), UTC timestamps.
func Config() *gorm.Config {
	return &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
}

// Open opens a gorm handle on dsn with Config and MaxConns connections.
func Open(dsn string) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(dsn), Config())
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(MaxConns)
	sqlDB.SetMaxIdleConns(MaxConns)
	return db, nil
}
