package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
)

func newCellsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cells", Short: "Work on the tenant → cell map's cells (move a tenant)"}
	cmd.AddCommand(newCellsMoveCmd())
	return cmd
}

// refoldCounts recounts the dashboard's folded key counts (key_counts, derived) on both cells
// of a finished move: the source's still count the tenant's keys, the target's never saw them.
func refoldCounts(set *cells.Set) func(ctx context.Context, from, to string) error {
	return func(ctx context.Context, from, to string) error {
		for _, name := range []string{from, to} {
			c, ok := set.Cell(name)
			if !ok {
				return fmt.Errorf("refold key counts: no cell %q in the map", name)
			}
			if err := keys.RefoldCounts(ctx, c.DB); err != nil {
				return fmt.Errorf("cell %s: %w", name, err)
			}
		}
		return nil
	}
}

func newCellsMoveCmd() *cobra.Command {
	var tenant, to string
	var drain time.Duration
	var abort bool
	cmd := &cobra.Command{
		Use:   "move --tenant T (--to CELL | --abort) [--cells FILE]",
		Short: "Move a tenant to another cell: freeze, copy, verify, switch the map (resumable: run it again after a stop)",
		Long: `Move a tenant's rows to another cell without two cells ever accepting it. The tenant's
claims answer 503 tenant-moving (Retry-After: 1) from the freeze to the switch. Every step is
recorded in the control cell (cell_moves); after a crash, run the same command again and it goes
on where it stopped. Leases still live after --drain-timeout, and stalled ones, are revoked: their
keys are taken over in the new cell, downstream looked up first. --abort gives up a move before its switch:
the rows copied are deleted and the tenant is served by its cell again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" || (to == "") == !abort {
				return usagef("cells move needs --tenant, and --to or --abort")
			}
			ctx := cmd.Context()
			d, err := openDatabase(ctx, cmd, false, true)
			if err != nil {
				return err
			}
			defer d.Close()
			if d.cellMap == nil {
				return usagef("cells move needs the cell map: --cells FILE or IDEMOPS_CELLS")
			}
			secret, err := digestSecret(cmd, d) // the move is audited, sealed under its key
			if err != nil {
				return err
			}
			// Every cell migrated (cell_fences, cell_moves) and its ids kept in its own range, so
			// the rows copied keep theirs.
			set, err := d.Cells(ctx, claim.Config{DigestSecret: secret})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			actor := operatorActor()
			audited := func(ctx context.Context, tx *gorm.DB, action string, detail map[string]any) error {
				return audit.New(tx, secret).Append(ctx, tx, audit.Entry{Actor: actor, Action: action, Target: tenant,
					Tenants: []string{tenant}, Detail: detail})
			}
			if abort {
				return cells.AbortMove(ctx, cells.MoveConfig{Map: d.cellMap, Tenant: tenant, Audit: audited, Progress: out})
			}
			start := time.Now()
			res, err := cells.Move(ctx, cells.MoveConfig{Map: d.cellMap, Tenant: tenant, To: to, DrainTimeout: drain,
				Audit: audited, Progress: out, Moved: refoldCounts(set)})
			if err != nil { // a refusal (unknown tenant or cell, …) is cells.ErrMoveRefused: exit 2
				return err
			}
			fmt.Fprintf(out, "moved tenant %s from %s to %s: %d keys, %d rows in %d tables; took %s (this run %s), freeze window %s; %d leases revoked\n",
				res.Tenant, res.From, res.To, res.Keys, sumCounts(res.Counts), len(res.Counts), res.Elapsed.Round(time.Millisecond),
				time.Since(start).Round(time.Millisecond), res.FreezeWindow.Round(time.Millisecond), res.Revoked)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant to move")
	cmd.Flags().StringVar(&to, "to", "", "the cell to move it to")
	cmd.Flags().BoolVar(&abort, "abort", false, "give up the tenant's move before its switch (the tenant stays in its cell)")
	cmd.Flags().DurationVar(&drain, "drain-timeout", 10*time.Second, "how long the frozen tenant's live leases may take to end before they are revoked")
	cmd.Flags().String("digest-secret", "", "deployment secret (env IDEMOPS_DIGEST_SECRET): the audit log's key is derived from it")
	addCellsFlag(cmd.Flags())
	return cmd
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
