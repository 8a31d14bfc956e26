package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/reconcile"
)

// newFindingsCmd is the reconciliation findings group: list here, bulk and export in
// findings_bulk.go; they share its operator flags.
func newFindingsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "findings list|bulk|export",
		Short: "Reconciliation findings: what the channels' statements and the local keys disagree on",
		Long: `Reconciliation findings, as the console's findings page shows them: with IDEMOPS_TOKEN (or
--token-file) set to an operator's API token, only findings of that operator's tenants (a
finding about a key is its tenant's, one about a statement line its channel account's); with the
database URL alone, every finding. With a cell map (--cells), the findings of every cell, as
the console lists them: newest first across the cells, a next page going on from where each
cell stopped.`,
		Args: cobra.NoArgs,
	}
	addOperatorFlags(cmd)
	addCellsFlag(cmd.PersistentFlags())
	cmd.AddCommand(newFindingsListCmd(), newFindingsBulkCmd(), newFindingsExportCmd())
	return cmd
}

func newFindingsListCmd() *cobra.Command {
	var (
		f      reconcile.FindingFilter
		kind   string
		state  string
		asJSON bool
		before string
	)
	cmd := &cobra.Command{
		Use:   "list [--state open] [--kind K] [--channel C] [--run N] [--bill-date D] [--key ID] [--limit N]",
		Short: "List findings, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Limit < 1 || f.Limit > 1000 {
				return usagef("--limit must be between 1 and 1000")
			}
			f.Kind, f.State = reconcile.Kind(kind), reconcile.FindingState(state)
			return inOperatorSession(cmd, false, func(ctx context.Context, s *operatorSession) error {
				rows, next, err := s.srv.FindingsPageFor(ctx, s.op, f, before)
				if err != nil {
					return err
				}
				err = writeRows(cmd.OutOrStdout(), asJSON, rows, "ID\tKIND\tSTATE\tCHANNEL\tBILL DATE\tKEY\tSUBJECT\tDETAIL",
					func(r reconcile.Finding) string {
						key := "-"
						if r.KeyID != nil {
							key = fmt.Sprint(*r.KeyID)
						}
						return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.ID, r.Kind, r.State, r.Channel, r.BillDate, key, r.Subject, r.Detail)
					})
				if err != nil {
					return err
				}
				if next != "" { // on stderr, so that --json's lines stay whole
					fmt.Fprintf(cmd.ErrOrStderr(), "more: add --before %s\n", next)
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only this state: open, resolved, ignored")
	fl.StringVar(&kind, "kind", "", "only this kind (LOCAL_ONLY, CHANNEL_ONLY, STATUS_MISMATCH, AMOUNT_MISMATCH, …)")
	fl.StringVar(&f.Channel, "channel", "", "only this channel")
	fl.Int64Var(&f.RunID, "run", 0, "only those the run found last")
	fl.StringVar(&f.BillDate, "bill-date", "", "only this bill date (YYYY-MM-DD)")
	fl.Int64Var(&f.KeyID, "key", 0, "only those about this key id")
	fl.StringVar(&before, "before", "", "continue from this cursor (printed by the previous page: a finding id, or with --cells a position in every cell)")
	fl.IntVar(&f.Limit, "limit", 100, "at most this many (≤ 1000)")
	fl.BoolVar(&asJSON, "json", false, "one JSON object per finding")
	return cmd
}
