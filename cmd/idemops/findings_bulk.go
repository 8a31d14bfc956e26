package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/reconcile"
)

// findingsFilterFlags are the findings page's filter parameters as flags, shared by bulk and
// export: each set flag becomes the query parameter of the same name (dashes for underscores).
type findingsFilterFlags struct {
	values map[string]*string
}

var findingsFilterFields = []struct{ name, help string }{
	{"state", "open, resolved or ignored"},
	{"kind", "LOCAL_ONLY, CHANNEL_ONLY, STATUS_MISMATCH, AMOUNT_MISMATCH, …"},
	{"channel", "the channel (account) name"},
	{"bill-date", "the bill date, YYYY-MM-DD"},
	{"run", "those the reconciliation run with this id found last"},
	{"key", "those about this key id"},
	{"order-no", "the merchant order number (a prefix when it ends in *)"},
	{"currency", "the currency (with --amount-min/--amount-max)"},
	{"amount-min", "at least this amount, in the currency's units (e.g. 12.50)"},
	{"amount-max", "at most this amount"},
}

func (ff *findingsFilterFlags) add(cmd *cobra.Command) {
	ff.values = map[string]*string{}
	for _, f := range findingsFilterFields {
		ff.values[f.name] = cmd.Flags().String(f.name, "", "only findings: "+f.help)
	}
}

// query is the set flags as the findings page's query.
func (ff *findingsFilterFlags) query() url.Values {
	q := url.Values{}
	for name, v := range ff.values {
		if *v != "" {
			q.Set(strings.ReplaceAll(name, "-", "_"), *v)
		}
	}
	return q
}

func newFindingsBulkCmd() *cobra.Command {
	var (
		ff      findingsFilterFlags
		in      console.FindingsBulkInput
		ids     []int64
		start   bool
		asJSON  bool
		reasons []string
	)
	for _, r := range reconcile.Reasons(reconcile.ActionResolve) {
		reasons = append(reasons, r.Code)
	}
	var recovers []string
	for _, r := range reconcile.Reasons(reconcile.ActionRecover) {
		recovers = append(recovers, r.Code)
	}
	cmd := &cobra.Command{
		Use:   "bulk --action ignore|resolve|recover --reason-code CODE [--note TEXT] [filter flags] [--id N…] [--start --upto N]",
		Short: "Resolve, ignore or recover every finding a filter matches: preview first, then start",
		Long: `Acts on the findings a filter matches (or the ones named by --id), as the console's bulk
action does. Without --start it previews — how many, for how much per currency, by kind, a sample,
and the newest finding it saw — and writes nothing. With --start and --upto (the preview's
"upto"), it starts the run: the daemon's job resolves, ignores or recovers each finding once,
audited one by one; above the deployment's approval count a second operator approves it in the
console first. A recover never executes anything: it asks the channel's statement again.

The reason is a code of a fixed vocabulary (the console shows it translated); "other" needs a
--note. Acting needs an operator: IDEMOPS_TOKEN (or --token-file) set to an operator's API token.`,
		Example: `  idemops findings bulk --action ignore --reason-code ` + firstOr(reasons, "duplicate") + ` --kind LOCAL_ONLY --bill-date 2026-12-01
  idemops findings bulk --action ignore --reason-code ` + firstOr(reasons, "duplicate") + ` --kind LOCAL_ONLY --bill-date 2026-12-01 --start --upto 8812`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch in.Action {
			case reconcile.ActionIgnore, reconcile.ActionResolve, reconcile.ActionRecover:
			default:
				return usagef("--action must be ignore, resolve or recover")
			}
			if len(ids) > reconcile.MaxBulkSelection {
				return usagef("--id: at most %d findings by hand", reconcile.MaxBulkSelection)
			}
			if start && in.UpTo <= 0 {
				return usagef("--start needs --upto: run the preview first (without --start) and pass the \"upto\" it printed")
			}
			in.Filter = ff.query()
			if len(ids) > 0 {
				in.IDs, in.Selected = ids, true
			}
			return inOperatorSession(cmd, true, func(ctx context.Context, s *operatorSession) error {
				out := cmd.OutOrStdout()
				if !start {
					p, err := s.srv.PreviewFindingsBulk(ctx, s.op, "cli", in)
					if err != nil {
						return err
					}
					if asJSON {
						return encodeJSON(out, p)
					}
					printBulkPreview(out, p)
					return nil
				}
				run, err := s.srv.StartFindingsBulk(ctx, s.op, "cli", in)
				if err != nil {
					return err
				}
				if asJSON {
					return encodeJSON(out, run)
				}
				fmt.Fprintf(out, "bulk run %d: %s, %d findings to %s\n", run.ID, run.State, run.Total, run.Action)
				if run.State == reconcile.BulkPendingApproval {
					fmt.Fprintf(out, "waiting for a second operator: the console's /reconcile/findings/bulk/%d\n", run.ID)
				}
				return nil
			})
		},
	}
	ff.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&in.Action, "action", "", "ignore, resolve or recover (required)")
	fl.StringVar(&in.ReasonCode, "reason-code", "", "why, a code of the action's vocabulary — resolve, ignore: "+strings.Join(reasons, ", ")+
		"; recover: "+strings.Join(recovers, ", ")+" (required)")
	fl.StringVar(&in.Note, "note", "", "a free note (required with the reason other)")
	fl.Int64SliceVar(&ids, "id", nil, "act on these findings only (repeat or comma-separate; they must match the filter too)")
	fl.BoolVar(&start, "start", false, "start the run (default: preview only)")
	fl.Int64Var(&in.UpTo, "upto", 0, "with --start: the newest finding the preview saw (its \"upto\"); newer ones are left alone")
	fl.BoolVar(&asJSON, "json", false, "the preview or the run as JSON (the API's POST /api/v1/reconcile/findings/bulk)")
	_ = cmd.MarkFlagRequired("action")
	_ = cmd.MarkFlagRequired("reason-code")
	return cmd
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}

func printBulkPreview(out io.Writer, p *reconcile.BulkPreview) {
	fmt.Fprintf(out, "%d findings would be %s (newest seen: %d)\n", p.Count, pastTense(p.Action), p.UpTo)
	kinds := make([]string, 0, len(p.ByKind))
	for k, n := range p.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	if len(kinds) > 0 {
		fmt.Fprintf(out, "by kind: %s\n", strings.Join(kinds, ", "))
	}
	cur := make([]string, 0, len(p.Amounts))
	for c := range p.Amounts {
		cur = append(cur, c)
	}
	sort.Strings(cur)
	for _, c := range cur {
		fmt.Fprintf(out, "amount: %d minor units of %s\n", p.Amounts[c], c)
	}
	for _, f := range p.Sample {
		fmt.Fprintf(out, "  #%d %s %s %s %s\n", f.ID, f.Kind, f.Channel, f.BillDate, f.Subject)
	}
	switch {
	case p.TooMany:
		fmt.Fprintf(out, "more than %d: one run cannot take them all; narrow the filter\n", p.Cap)
	case p.Count == 0:
		fmt.Fprintln(out, "nothing to act on")
	default:
		if p.NeedsApproval {
			fmt.Fprintf(out, "more than %d: a second operator approves the run in the console\n", p.ApprovalAbove)
		}
		fmt.Fprintf(out, "start it: the same command with --start --upto %d\n", p.UpTo)
	}
}

func pastTense(action string) string {
	switch action {
	case "ignore":
		return "ignored"
	case "recover":
		return "recovered"
	}
	return "resolved"
}

func newFindingsExportCmd() *cobra.Command {
	var (
		ff     findingsFilterFlags
		format string
		output string
	)
	cmd := &cobra.Command{
		Use:   "export --format csv|xlsx [--output FILE] [filter flags]",
		Short: "Export the findings a filter matches as CSV or XLSX (the console's Export)",
		Long: `Writes the findings a filter matches — the columns of the console's findings page, money as
decimal strings with their currency, times in the operator's zone with their offset — as CSV
(UTF-8 with a byte order mark, for spreadsheets) or XLSX, to --output or standard output. An
export holds at most a fixed number of findings: above it, narrow the filter. Audited.`,
		Example: `  idemops findings export --format csv --state open --bill-date 2026-12-01 > open.csv
  idemops findings export --format xlsx --channel paysim-wechat --output wechat.xlsx`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "csv" && format != "xlsx" {
				return usagef("--format must be csv or xlsx")
			}
			if format == "xlsx" && output == "" {
				return usagef("--format xlsx needs --output FILE (a workbook is not for a terminal)")
			}
			return inOperatorSession(cmd, false, func(ctx context.Context, s *operatorSession) error {
				var w io.Writer = cmd.OutOrStdout()
				var tmp *os.File
				if output != "" {
					// Written beside the target and renamed at the end: a refused or failed export
					// leaves no partial file.
					var err error
					if tmp, err = os.CreateTemp(filepath.Dir(output), ".findings-export-*"); err != nil {
						return fmt.Errorf("--output: %w", err)
					}
					defer os.Remove(tmp.Name())
					defer tmp.Close()
					w = tmp
				}
				if err := s.srv.ExportFindings(ctx, s.op, ff.query(), format, w); err != nil {
					return err
				}
				if tmp != nil {
					if err := tmp.Close(); err != nil {
						return fmt.Errorf("--output: %w", err)
					}
					if err := os.Rename(tmp.Name(), output); err != nil {
						return fmt.Errorf("--output: %w", err)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", output)
				}
				return nil
			})
		},
	}
	ff.add(cmd)
	cmd.Flags().StringVar(&format, "format", "csv", "csv or xlsx")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file (default: standard output; required for xlsx)")
	return cmd
}
