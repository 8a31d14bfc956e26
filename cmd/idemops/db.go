package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/migrations"
)

// database is an open store plus whatever must be stopped with it.
type database struct {
	DB      *gorm.DB
	URL     string
	cluster *pglocal.Cluster
	console *gorm.DB // the console's handle (ConsoleDB), opened on first use
	// cellMap is the --cells map (nil: one database); DB is then its control cell's, and cells
	// (Cells) every cell's, opened on first use.
	cellMap  *cells.Map
	cells    *cells.Set
	migrated bool
}

// ConsoleDB is the console's handle on the same database: every statement runs under the
// tenants of the operator it is for (internal/tenantdb, row-level security of migration 00118).
// It makes sure the login may switch to the tenant role first (migrations.EnsureTenantRole).
func (d *database) ConsoleDB(ctx context.Context) (*gorm.DB, error) {
	if d.console != nil {
		return d.console, nil
	}
	sqlDB, err := d.DB.DB()
	if err != nil {
		return nil, err
	}
	if err := migrations.EnsureTenantRole(ctx, sqlDB); err != nil {
		return nil, err
	}
	cdb, err := tenantdb.Open(d.URL)
	if err != nil {
		return nil, fmt.Errorf("connect the console to the database: %w", err)
	}
	d.console = cdb
	return cdb, nil
}

func (d *database) Close() {
	if d.cells != nil {
		d.cells.Close() // the control cell's pool with it
	}
	if d.console != nil {
		if sqlDB, err := d.console.DB(); err == nil {
			sqlDB.Close()
		}
	}
	if d.DB != nil {
		if sqlDB, err := d.DB.DB(); err == nil {
			sqlDB.Close()
		}
	}
	if d.cluster != nil {
		d.cluster.Stop()
	}
}

// flagOrEnv returns the flag's value if set, else the environment variable, else the default.
func flagOrEnv(cmd *cobra.Command, flag, env string) string {
	f := cmd.Flag(flag)
	if f != nil && f.Changed {
		return f.Value.String()
	}
	if v := os.Getenv(env); v != "" {
		return v
	}
	if f != nil {
		return f.Value.String()
	}
	return ""
}

// dataPath names an entry of --data-dir, the one folder that holds everything local: the private
// cluster (pg/) and its log, the digest secret, the demo's paysim state.
func dataPath(cmd *cobra.Command, name string) string {
	return filepath.Join(flagOrEnv(cmd, "data-dir", "IDEMOPS_DATA_DIR"), name)
}

// openPool is the project's pool opener.
var openPool = pgpool.Open

// openDatabase connects to --database-url / DATABASE_URL, or starts the private cluster when
// allowPrivate and neither is set; with a cell map (--cells, on the commands that take it) to
// its control cell's database. With migrate, pending migrations are applied first.
func openDatabase(ctx context.Context, cmd *cobra.Command, allowPrivate, migrate bool) (*database, error) {
	m, err := cellMap(cmd)
	if err != nil {
		return nil, err
	}
	return openDatabaseOf(ctx, cmd, m, allowPrivate, migrate)
}

// openDatabaseOf is openDatabase with the cell map m (nil: none) given rather than read from the
// command's flags.
func openDatabaseOf(ctx context.Context, cmd *cobra.Command, m *cells.Map, allowPrivate, migrate bool) (*database, error) {
	d := &database{URL: flagOrEnv(cmd, "database-url", "DATABASE_URL"), cellMap: m, migrated: migrate}
	if m != nil {
		control, _ := m.Cell(m.Control())
		d.URL = control.URL
	}
	if d.URL == "" {
		if !allowPrivate {
			return nil, usagef("no database: set DATABASE_URL or --database-url")
		}
		logPath := dataPath(cmd, "postgres.log")
		_ = os.MkdirAll(filepath.Dir(logPath), 0o755)
		logf, _ := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		c, err := pglocal.Start(ctx, pglocal.Options{DataDir: dataPath(cmd, "pg"), Log: logf})
		if err != nil {
			return nil, fmt.Errorf("private PostgreSQL: %w", err)
		}
		d.cluster = c
		d.URL = c.URL("postgres")
	}
	db, err := openPool(d.URL)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("connect to the database (--database-url / DATABASE_URL): %w", err)
	}
	d.DB = db
	if migrate {
		sqlDB, _ := db.DB()
		if err := migrations.Up(ctx, sqlDB); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}
