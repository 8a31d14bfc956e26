package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/migrations"
	"github.com/idemops/idemops/reconcile"
)

// cellDB is one cell's database as a command that works cell by cell (purge, jobs list) uses it.
type cellDB struct {
	Name string // the cell's name; "" without a map (the one database)
	DB   *gorm.DB
}

// cellDBs are the databases a command works on: without a cell map d's one database; with one,
// every cell's in the map's order — the control cell's is d.DB, the others opened here
// (migrated when d was) and closed by close.
func (d *database) cellDBs(ctx context.Context) (dbs []cellDB, close func(), err error) {
	if d.cellMap == nil {
		return []cellDB{{DB: d.DB}}, func() {}, nil
	}
	var opened []*gorm.DB
	close = func() {
		for _, db := range opened {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}
	}
	for _, c := range d.cellMap.Cells() {
		if c.Name == d.cellMap.Control() {
			dbs = append(dbs, cellDB{c.Name, d.DB})
			continue
		}
		db, err := openPool(c.URL)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("cell %s: connect: %w", c.Name, err)
		}
		opened = append(opened, db)
		if d.migrated {
			sqlDB, _ := db.DB()
			if err := migrations.Up(ctx, sqlDB); err != nil {
				close()
				return nil, nil, fmt.Errorf("cell %s: %w", c.Name, err)
			}
		}
		dbs = append(dbs, cellDB{c.Name, db})
	}
	return dbs, close, nil
}

// onEveryCell opens the database (migrated when migrate) and runs fn on it: with a cell map
// (--cells), on every cell's database in the map's order, each cell's lines under "== cell NAME"
// (a blank line between cells). A cell that fails does not stop the others (each cell's data is
// its own); the failures come back joined, each naming its cell.
func onEveryCell(cmd *cobra.Command, migrate bool, fn func(ctx context.Context, c cellDB, out io.Writer) error) error {
	return withCellDBs(cmd, migrate, func(ctx context.Context, dbs []cellDB) error {
		out := cmd.OutOrStdout()
		var failed []error
		for i, c := range dbs {
			if c.Name != "" {
				if i > 0 {
					fmt.Fprintln(out)
				}
				fmt.Fprintf(out, "== cell %s\n", c.Name)
			}
			if err := fn(ctx, c, out); err != nil {
				if c.Name != "" {
					err = fmt.Errorf("cell %s: %w", c.Name, err)
				}
				failed = append(failed, err)
			}
		}
		return errors.Join(failed...)
	})
}

// withCellDBs opens the database (migrated when migrate) and gives fn its cellDBs, closed after.
func withCellDBs(cmd *cobra.Command, migrate bool, fn func(ctx context.Context, dbs []cellDB) error) error {
	ctx := cmd.Context()
	d, err := openDatabase(ctx, cmd, true, migrate)
	if err != nil {
		return err
	}
	defer d.Close()
	dbs, closeCells, err := d.cellDBs(ctx)
	if err != nil {
		return err
	}
	defer closeCells()
	return fn(ctx, dbs)
}

// inKeysCell runs fn on the database holding the key fn is about: the one database, or, with a
// cell map (--cells), each cell's in turn until fn finds the key there (ids are unique across
// cells; a key is in one cell, or — during its tenant's move — in two, where the fences refuse
// changes). fn's not-found in every cell is the answer.
func inKeysCell(cmd *cobra.Command, fn func(ctx context.Context, db *gorm.DB) error) error {
	return withCellDBs(cmd, true, func(ctx context.Context, dbs []cellDB) (err error) {
		for _, c := range dbs {
			if err = fn(ctx, c.DB); errs.KindOf(err) != errs.NotFound {
				return err
			}
		}
		return err
	})
}

// jobReplicas are the replicas `jobs run NAME` runs NAME on. Without a map, the one. With one:
// the named cell's (--cell); else a recon job's schedule (or the reconcile job itself) on the
// control cell's replica alone — recon jobs live there, and it sends the statement to the cells
// of the job's channel account's tenants —; any other job, each cell's own (reclaim, outbox,
// purge, bulk runs), on every cell's.
func jobReplicas(ctx context.Context, d *database, ds replicas, name, cell string) ([]cellReplica, error) {
	if d.cells == nil {
		if cell != "" {
			return nil, usagef("--cell %s: there is no cell map (--cells FILE / IDEMOPS_CELLS)", cell)
		}
		return []cellReplica{{"", ds[0].Daemon}}, nil
	}
	all := make([]cellReplica, len(ds))
	for i, r := range ds {
		all[i] = cellReplica{r.cell.Name, r.Daemon}
	}
	if cell != "" {
		for _, r := range all {
			if r.Cell == cell {
				return []cellReplica{r}, nil
			}
		}
		return nil, usagef("--cell %s: no such cell in %s", cell, d.cellMap.File)
	}
	control := d.cells.Control()
	reconJob := name == reconcile.JobName
	if s, err := daemon.GetSchedule(ctx, control.DB, name); err == nil {
		reconJob = s.Job == reconcile.JobName
	} else if !errors.Is(err, daemon.ErrUnknownSchedule) {
		return nil, err
	}
	if !reconJob {
		return all, nil
	}
	for _, r := range all {
		if r.Cell == control.Name {
			return []cellReplica{r}, nil
		}
	}
	return nil, fmt.Errorf("no replica for the control cell %s", control.Name)
}

// cellReplica is a daemon replica and the cell it works ("" without a map).
type cellReplica struct {
	Cell string
	D    *daemon.Daemon
}
