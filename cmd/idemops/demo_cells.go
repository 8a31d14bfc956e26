package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pglocal"
)

// maxDemoCells is how many cells `idemops demo --cells N` can make: one per demo tenant.
const maxDemoCells = 2

// demoCellCount is the demo's --cells: how many cells (private PostgreSQL clusters) it runs.
// Its type is not "string", so the commands' --cells FILE reading (cellMap) leaves it alone.
type demoCellCount int

func (n *demoCellCount) String() string { return strconv.Itoa(int(*n)) }
func (n *demoCellCount) Type() string   { return "count" }
func (n *demoCellCount) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > maxDemoCells {
		return fmt.Errorf("must be 1 (one database) or %d (a cell per demo tenant)", maxDemoCells)
	}
	*n = demoCellCount(v)
	return nil
}

// demoCellPlan is where `demo --cells 2` puts things: cell a (the control cell: operators,
// sessions, audit, recon jobs) holds acme in the data dir's usual cluster (pg/), so a one-cell
// demo run before or after sees the same control database; cell b holds globex in pg-b/.
var demoCellPlan = []struct {
	name, dir, log string
	tenants        []string
}{
	{"a", "pg", "postgres.log", []string{"acme"}},
	{"b", "pg-b", "postgres-b.log", []string{"globex"}},
}

// demoCells starts a private PostgreSQL cluster per cell (at once), writes the cell map for them
// under the data dir (cells.yaml, for the CLI: IDEMOPS_CELLS), and opens the control cell's
// database, migrated; database.Cells opens the others. stop stops the clusters the database
// does not (it stops the control cell's).
func demoCells(ctx context.Context, cmd *cobra.Command, n int) (d *database, stop func(), err error) {
	if flagOrEnv(cmd, "database-url", "DATABASE_URL") != "" {
		return nil, nil, usagef("--cells %d starts a private PostgreSQL cluster per cell: unset DATABASE_URL / --database-url", n)
	}
	plan := demoCellPlan[:n]
	clusters := make([]*pglocal.Cluster, n)
	stopAll := func() {
		for _, c := range clusters {
			if c != nil {
				c.Stop()
			}
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logPath := dataPath(cmd, p.log)
			_ = os.MkdirAll(filepath.Dir(logPath), 0o755)
			logf, _ := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if clusters[i], errs[i] = pglocal.Start(ctx, pglocal.Options{DataDir: dataPath(cmd, p.dir), Log: logf}); errs[i] != nil {
				errs[i] = fmt.Errorf("private PostgreSQL of cell %s: %w", p.name, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll()
		return nil, nil, err
	}
	path := dataPath(cmd, "cells.yaml")
	m, err := demoCellMap(path, clusters)
	if err == nil {
		err = cells.Write(path, m)
	}
	if err != nil {
		stopAll()
		return nil, nil, err
	}
	if d, err = openDatabaseOf(ctx, cmd, m, false, true); err != nil {
		stopAll()
		return nil, nil, err
	}
	d.cluster = clusters[0] // stopped with the database, like the one-cell demo's
	return d, func() {
		for _, c := range clusters[1:] {
			c.Stop()
		}
	}, nil
}

// demoCellMap is the map for this run's clusters (their ports change from run to run). The
// tenants stay where the map of the last run put them — a tenant moved (`idemops cells move`)
// stays moved, its old cell fenced against it — when that map has this run's cells and places
// every demo tenant; otherwise they go where demoCellPlan says.
func demoCellMap(path string, clusters []*pglocal.Cluster) (*cells.Map, error) {
	plan := demoCellPlan[:len(clusters)]
	last, err := cells.Load(path)
	keep := err == nil && len(last.Cells()) == len(plan)
	specs := make([]cells.CellSpec, len(plan))
	for i, p := range plan {
		specs[i] = cells.CellSpec{Name: p.name, ID: i + 1, URL: clusters[i].URL("postgres"), Tenants: p.tenants}
		if keep {
			c, ok := last.Cell(p.name)
			keep = ok && c.ID == i+1
			specs[i].Tenants = c.Tenants
		}
	}
	if keep {
		for _, p := range plan {
			for _, t := range p.tenants {
				_, placed := last.CellOf(t)
				keep = keep && placed
			}
		}
	}
	if !keep {
		for i, p := range plan {
			specs[i].Tenants = p.tenants
		}
	}
	return cells.New(plan[0].name, specs)
}

// openDemoDatabase opens the demo's database: the one of --database-url / DATABASE_URL or the
// private cluster with one cell, the control cell's of a private cluster per cell with more.
// stopCells stops the clusters the database does not.
func openDemoDatabase(ctx context.Context, cmd *cobra.Command, n int) (d *database, stopCells func(), err error) {
	if n > 1 {
		return demoCells(ctx, cmd, n)
	}
	d, err = openDatabase(ctx, cmd, true, true)
	return d, func() {}, err
}

// demoStores is the demo's claim store on its database (the control cell's with cells) and, with
// cells, the open set the services route by.
func demoStores(ctx context.Context, d *database, cfg claim.Config) (*claim.Store, *cells.Set, error) {
	set, err := d.Cells(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if set == nil {
		store, err := claim.NewStore(d.DB, cfg)
		return store, nil, err
	}
	// The set's own store on the control cell, so that routing to the control cell's tenants
	// finds the very store the world and the console use.
	return set.Control().Store, set, nil
}

// printDemoCells is the banner's cells part: each cell's tenants and database, the control
// cell's for the CLI, and the map for the commands that take one.
func printDemoCells(out io.Writer, m *cells.Map) {
	for _, c := range m.Cells() {
		role := ""
		if c.Name == m.Control() {
			role = ", control: operators, sessions, audit"
		}
		tenants := "tenants " + strings.Join(c.Tenants, ", ")
		if len(c.Tenants) == 0 {
			tenants = "no tenants"
		}
		fmt.Fprintf(out, "  cell %-4s %s   (%s%s)\n", c.Name, c.URL, tenants, role)
	}
	control, _ := m.Cell(m.Control())
	fmt.Fprintf(out, "            (for the CLI while the demo runs: export DATABASE_URL='%s' IDEMOPS_CELLS='%s')\n", control.URL, m.File)
	fmt.Fprintf(out, "            (the console's keys list both cells' keys, newest first; a key opens in its own cell)\n")
}
