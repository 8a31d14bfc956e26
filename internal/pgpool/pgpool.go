// Package pgpool opens the one pool the binary and the stores share on a PostgreSQL URL, with the
// settings the project uses everywhere (docs/ARCHITECTURE.md, "one pool").
package pgpool

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
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
func Open(dsn string) (*gorm.DB, error) { return open(postgres.Open(dsn), Config()) }

func open(d gorm.Dialector, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gorm.Open(d, cfg)
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

// OpenGated is Open for a database that may not answer yet (a tenant cell not reached since the
// process started): nothing is connected until needed, and every new connection asks gate
// first — while it returns an error, that error is the connection's, so nothing reaches the
// database before its owner has checked it.
func OpenGated(dsn string, gate func() error) (*gorm.DB, error) {
	cfg := Config()
	cfg.DisableAutomaticPing = true
	return open(postgres.New(postgres.Config{DSN: dsn, OptionOpenDB: []stdlib.OptionOpenDB{
		stdlib.OptionBeforeConnect(func(context.Context, *pgx.ConnConfig) error { return gate() })}}), cfg)
}
