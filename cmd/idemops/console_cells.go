package main

import (
	"context"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
)

// consoleCells gives the console the --cells map's cells (ccfg.Cells; nothing without a map):
// its key lists fan out to them and a key's actions go to its own cell. ccfg.DB, the control
// cell's tenant handle, serves the control cell. close closes the handles it opened.
func consoleCells(ctx context.Context, d *database, cfg claim.Config, ccfg *console.Config) (close func(), err error) {
	set, err := d.Cells(ctx, cfg)
	if err != nil || set == nil {
		return func() {}, err
	}
	cs, closeCells, err := console.CellsOf(set, ccfg.DB, ccfg.Logger)
	if err != nil {
		return nil, err
	}
	ccfg.Cells = cs
	return closeCells, nil
}
