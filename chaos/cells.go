package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pgha"
	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/migrations"
)

// MaxCells is the most cells a run splits its tenants over (it has two tenants).
const MaxCells = 2

// CellNames are the cells of a run with --cells, in map order (the first is the control cell).
var CellNames = []string{"a", "b"}

// cell is one PostgreSQL of the world: the whole world's in a run without cells (name ""), or
// one cell's — a pg_auto_failover pair with HA, a single cluster without — holding its tenants.
type cell struct {
	name     string
	tenants  []string // nil: every tenant (no cells)
	ha       *pgha.Set
	pg       *pglocal.Cluster
	bouncers []*pgha.Bouncer
	db       *gorm.DB // the runner's own pool, straight to PostgreSQL (not through the poolers)
	partsURL string   // the parts' connection string: through the poolers
}

// label is how a cell is named in the log and the report ("cell a"); "" without cells.
func (c *cell) label() string {
	if c.name == "" {
		return ""
	}
	return "cell " + c.name
}

// directURL is the runner's connection string to the cell (its own, no pooler).
func (c *cell) directURL() string {
	if c.ha != nil {
		return c.ha.URL("idemops")
	}
	return c.pg.URL("postgres")
}

// holds says whether tenant lives in c.
func (c *cell) holds(tenant string) bool {
	return c.tenants == nil || slices.Contains(c.tenants, tenant)
}

// stop stops the cell's poolers and PostgreSQL (the pool is the set's, or closed by teardown).
func (c *cell) stop() {
	for _, b := range c.bouncers {
		b.Stop()
	}
	if c.pg != nil {
		c.pg.Stop()
		_ = os.RemoveAll(c.pg.DataDir)
	}
	if c.ha != nil {
		c.ha.Stop()
	}
}

// newCells lays out the run's cells: one without --cells; else n cells named from CellNames,
// the tenants dealt round robin (acme → a, globex → b).
func newCells(n int, tenants []string) []*cell {
	if n <= 1 {
		return []*cell{{}}
	}
	out := make([]*cell, n)
	for i := range out {
		out[i] = &cell{name: CellNames[i], tenants: []string{}}
	}
	for i, t := range tenants {
		out[i%n].tenants = append(out[i%n].tenants, t)
	}
	return out
}

// cellOf is tenant's cell.
func (w *world) cellOf(tenant string) *cell {
	for _, c := range w.pgs {
		if c.holds(tenant) {
			return c
		}
	}
	return w.pgs[0]
}

// cellNamed is the cell called name (nil when none is).
func (w *world) cellNamed(name string) *cell {
	for _, c := range w.pgs {
		if c.name == name {
			return c
		}
	}
	return nil
}

// withCells says whether the run has cells (a cell map, parts started with --cells).
func (w *world) withCells() bool { return len(w.pgs) > 1 }

// haRunning says whether PostgreSQL runs as pg_auto_failover (every cell, or none).
func (w *world) haRunning() bool { return w.pgs[0].ha != nil }

// cellNames are the cells' names ("" for a run without cells).
func (w *world) cellNames() []string {
	if !w.withCells() {
		return nil
	}
	var out []string
	for _, c := range w.pgs {
		out = append(out, c.name)
	}
	return out
}

// startPostgres starts every cell's PostgreSQL side by side: with HA a pg_auto_failover set per
// cell — when one cannot start, none is kept and every cell gets a single cluster instead (the
// error says why, for the report) — else a single cluster per cell.
func (w *world) startPostgres(ctx context.Context, logs string) (haErr, err error) {
	logOf := func(c *cell) *os.File {
		name := "postgres.log"
		if c.name != "" {
			name = "postgres-" + c.name + ".log"
		}
		lf, _ := os.Create(filepath.Join(logs, name))
		return lf
	}
	each := func(f func(c *cell) error) error {
		errs := make([]error, len(w.pgs))
		var wg sync.WaitGroup
		for i, c := range w.pgs {
			wg.Go(func() {
				if errs[i] = f(c); errs[i] != nil && c.name != "" {
					errs[i] = fmt.Errorf("cell %s: %w", c.name, errs[i])
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if w.cfg.HA {
		haErr = each(func(c *cell) error {
			var err error
			if c.ha, err = pgha.Start(ctx, pgha.Options{Log: logOf(c), StartTimeout: 3 * time.Minute}); err != nil {
				return err
			}
			return c.ha.CreateDatabase(ctx, "idemops")
		})
		if haErr == nil {
			return nil, nil
		}
		for _, c := range w.pgs {
			if c.ha != nil {
				c.ha.Stop()
				c.ha = nil
			}
		}
	}
	return haErr, each(func(c *cell) error {
		dir, err := os.MkdirTemp("/tmp", "idemops-chaos-pg-")
		if err != nil {
			return err
		}
		c.pg, err = pglocal.Start(ctx, pglocal.Options{DataDir: dir, Log: logOf(c), MaxConnections: 300})
		return err
	})
}

// cellMap is the run's cell map with each cell's url: the runner's own (direct) or the parts'
// (through the poolers). Cell ids follow the map order (a = 1, b = 2); a is the control cell.
func (w *world) cellMap(url func(*cell) string) (*cells.Map, error) {
	var specs []cells.CellSpec
	for i, c := range w.pgs {
		specs = append(specs, cells.CellSpec{Name: c.name, ID: i + 1, URL: url(c), Tenants: c.tenants})
	}
	return cells.New(w.pgs[0].name, specs)
}

// openCells opens the runner's pools and migrates every cell; with cells through cells.Open
// (each cell's identity and id range, as the parts will find them), so w.db and w.store are the
// control cell's.
func (w *world) openCells(ctx context.Context, secret string) error {
	if !w.withCells() {
		c := w.pgs[0]
		db, err := pgpool.Open(c.directURL())
		if err != nil {
			return err
		}
		c.db, w.db = db, db
		sqlDB, _ := db.DB()
		if err := migrations.Up(ctx, sqlDB); err != nil {
			return err
		}
		w.store, err = claim.NewStore(db, claim.Config{DigestSecret: []byte(secret)})
		return err
	}
	m, err := w.cellMap((*cell).directURL)
	if err != nil {
		return fmt.Errorf("chaos: cell map: %w", err)
	}
	if w.set, err = cells.Open(ctx, m, cells.Options{Migrate: true, Claim: claim.Config{DigestSecret: []byte(secret)}}); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	for _, c := range w.pgs {
		oc, ok := w.set.Cell(c.name)
		if !ok {
			return fmt.Errorf("chaos: cell %s not opened", c.name)
		}
		c.db = oc.DB
		// The console's tenant role, in every cell's cluster (roles are a cluster's): the console
		// makes it in the control cell only, and its login through the poolers cannot hold the
		// session lock that serializes the making.
		sqlDB, err := c.db.DB()
		if err != nil {
			return err
		}
		if err := migrations.EnsureTenantRole(ctx, sqlDB); err != nil {
			return fmt.Errorf("chaos: cell %s: %w", c.name, err)
		}
	}
	w.db, w.store = w.set.Control().DB, w.set.Control().Store
	return nil
}

// cellsText is the split, for the log and the report: "a: acme; b: globex".
func (w *world) cellsText() string {
	var parts []string
	for _, c := range w.pgs {
		parts = append(parts, c.name+": "+strings.Join(c.tenants, ", "))
	}
	return strings.Join(parts, "; ")
}
