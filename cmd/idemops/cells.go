package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// addCellsFlag declares --cells on a command that routes by tenant (serve, daemon).
func addCellsFlag(f *pflag.FlagSet) {
	f.String("cells", "", "tenant → cell map (YAML, env IDEMOPS_CELLS; see docs/SCALING.md): every cell's database is migrated and "+
		"served, each tenant only in its own; the control cell's database holds operators, sessions and audit. Unset: one database")
}

// cellMap is the map --cells / IDEMOPS_CELLS names, read and validated whole (a refusal names the
// file, line, field or tenant; exit 2); nil when the command takes no map or none is given —
// one database, as without cells. The demo's --cells is a number of cells it makes itself, not
// a map file (the flag's type says which).
func cellMap(cmd *cobra.Command) (*cells.Map, error) {
	if f := cmd.Flag("cells"); f == nil || f.Value.Type() != "string" {
		return nil, nil
	}
	path := flagOrEnv(cmd, "cells", "IDEMOPS_CELLS")
	if path == "" {
		return nil, nil
	}
	if f := cmd.Flag("database-url"); f != nil && f.Changed {
		return nil, usagef("--cells and --database-url both name databases: the cell map names every one (its control cell is the main database)")
	}
	return cells.Load(path)
}

// Cells opens every cell of the map the database was opened with (the control cell's pool is
// d.DB's): migrated when the database was, each cell's claim store made with cfg. Nil without a
// map.
func (d *database) Cells(ctx context.Context, cfg claim.Config) (*cells.Set, error) {
	if d.cellMap == nil || d.cells != nil {
		return d.cells, nil
	}
	control := d.DB
	set, err := cells.Open(ctx, d.cellMap, cells.Options{Migrate: d.migrated, Claim: cfg, Logger: cfg.Logger,
		OpenDB: func(url string) (*gorm.DB, error) {
			if url == d.URL { // the control cell: the pool the console already uses
				return control, nil
			}
			return openPool(url)
		}})
	if err != nil {
		return nil, err
	}
	d.cells = set
	// A move's switch rewrites the map file: follow it, so a moved tenant's claims reach its new
	// cell within a second (meanwhile the old cell answers 503 tenant-moving, Retry-After: 1).
	go set.Watch(ctx, time.Second, func(err error) {
		if err != nil {
			slog.Warn("cells: the rewritten map was not taken; routing as before", "err", err)
		} else {
			slog.Info("cells: routing by the rewritten map", "file", set.Map().File)
		}
	})
	return set, nil
}

// cellDeps are the daemon's dependencies on one cell: its database and store, metrics carrying
// cell="name", log lines too; the audit log the control cell's. With a console in the process
// (deps.Replays: serve, demo) the cell's bulk replays run on the console's workflow in the cell
// (replay.Workflow.In), as the console's own replays there do: counted in the console's replay
// counter, which the console registered once, unlabelled — not again under the cell's label.
// Without one, each cell's replica makes its own workflow, its counter labelled by the cell.
func cellDeps(deps daemonDeps, set *cells.Set, c *cells.Cell) daemonDeps {
	deps.DB, deps.Store = c.DB, c.Store
	if deps.Registerer != nil {
		deps.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"cell": c.Name}, deps.Registerer)
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if c != set.Control() {
		// The audit chain is the control cell's alone: a cell's jobs append there, apart from
		// their own transactions (audit.Log.Elsewhere), never to the cell's own audit_log.
		deps.Audit = audit.New(set.Control().DB, c.Store.Config().DigestSecret).Elsewhere()
	} else { // recon jobs live in the control cell; their statements are matched in the cells
		deps.Recon.Cells = cellReconcilers(set, deps)
	}
	if deps.Replays != nil {
		log := deps.Audit
		if log == nil { // the control cell's own
			log = audit.New(c.DB, c.Store.Config().DigestSecret)
		}
		deps.Replays = deps.Replays.In(c.DB, c.Store, log)
	}
	deps.Logger = deps.Logger.With("cell", c.Name)
	return deps
}

// cellReconcilers is the control cell's reconcile.Config.Cells: the cells holding any of a
// channel account's tenants (every cell for "*"), each with a reconciler on its own database,
// made once.
func cellReconcilers(set *cells.Set, deps daemonDeps) func(tenants []string) ([]reconcile.Cell, error) {
	var mu sync.Mutex
	made := map[*cells.Cell]*reconcile.Reconciler{}
	return func(tenants []string) ([]reconcile.Cell, error) {
		mu.Lock()
		defer mu.Unlock()
		m := set.Map()
		var out []reconcile.Cell
		for _, c := range set.Cells() {
			spec, _ := m.Cell(c.Name)
			if !slices.Contains(tenants, reconcile.AllTenants) && !slices.ContainsFunc(spec.Tenants, func(t string) bool { return slices.Contains(tenants, t) }) {
				continue
			}
			rec, ok := made[c]
			if !ok {
				cfg := deps.Recon
				cfg.Cells, cfg.Store, cfg.Operations = nil, c.Store, deps.Operations
				cfg.Logger = deps.Logger.With("cell", c.Name)
				var err error
				if rec, err = reconcile.New(c.DB, cfg); err != nil {
					return nil, fmt.Errorf("cell %s: %w", c.Name, err)
				}
				made[c] = rec
			}
			out = append(out, reconcile.Cell{Name: c.Name, Rec: rec})
		}
		return out, nil
	}
}

// newCellDaemons builds one replica per cell: each its own leader lease in its own database and
// its own jobs, so one cell's failover or backlog never holds up another's. A cell unavailable
// since start has its replica built (its metrics say the store is down) and started when the
// cell is up (replicas.Start).
func newCellDaemons(deps daemonDeps, set *cells.Set, opt daemonOptions) (replicas, error) {
	var out replicas
	for _, c := range set.Cells() {
		cd := cellDeps(deps, set, c)
		d, err := newDaemon(cd, opt)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.Name, err)
		}
		out = append(out, &replica{Daemon: d, cell: c, log: cd.Logger})
	}
	return out, nil
}

// startCellDaemons is startDaemon for every cell; stop stops them all. The replica of a cell
// unavailable since start starts when the cell is up (a failure then logged), unless stop came
// first.
func startCellDaemons(ctx context.Context, deps daemonDeps, set *cells.Set, opt daemonOptions) (stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, c := range set.Cells() {
		if c.Err() != nil { // built now (its metrics say the store is down), started once up
			cd := cellDeps(deps, set, c)
			dm, err := newDaemon(cd, opt)
			if err != nil {
				stopAll()
				return nil, fmt.Errorf("cell %s: %w", c.Name, err)
			}
			stops = append(stops, startWhenUp(ctx, c, cmp.Or(deps.Logger, slog.Default()), func() (func(), error) { return startBuilt(ctx, dm, cd) }))
			continue
		}
		s, err := startDaemon(ctx, cellDeps(deps, set, c), opt)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("cell %s: %w", c.Name, err)
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}

// startWhenUp runs start in the background once c is up, unless the stop it returns is called
// first; stop stops what start started.
func startWhenUp(ctx context.Context, c *cells.Cell, log *slog.Logger, start func() (func(), error)) (stop func()) {
	var mu sync.Mutex
	var stopped bool
	var stopIt func()
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-c.Up():
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		s, err := start()
		if err != nil {
			log.Error("daemon: the replica of a cell that came up did not start", "cell", c.Name, "err", err)
			return
		}
		stopIt = s
		log.Info("daemon: the replica of a cell that came up started", "cell", c.Name)
	}()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if stopIt != nil {
			stopIt()
		}
	}
}
