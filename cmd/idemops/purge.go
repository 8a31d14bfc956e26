package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/retention"
)

// operatorActor names the person running a CLI command in the audit log and key histories:
// operator:LOGIN (the terminal's login; the console names its signed-in operator instead).
func operatorActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "operator:" + u.Username
	}
	return "operator:cli"
}

func newPurgeCmd() *cobra.Command {
	var opts retention.Options
	cmd := &cobra.Command{
		Use:   "purge [--dry-run] [--operation X] [--batch N]",
		Short: "Purge idempotency keys whose retention period is over (tombstone responses, delete keys)",
		Long: `Purge applies the retention policies: it brings keys' expiry in line with the policies, deletes
keys whose period is over (with their history), and drops the stored response of keys whose
response period is over, leaving a tombstone that answers a late retry "result expired".
Processing keys, keys on legal hold and keys of open reconciliation findings are never touched.
--dry-run counts what would go per operation, state and day, and changes nothing. With a cell
map (--cells), every cell is purged under its own policies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Actor = operatorActor()
			// With a cell map, every cell is purged by its own policies (each cell's daemon purges
			// it the same way), one after the other.
			return onEveryCell(cmd, true, func(ctx context.Context, c cellDB, out io.Writer) error {
				job, err := retention.NewPurgeJob(c.DB, retention.Config{})
				if err != nil {
					return err
				}
				bar := newPurgeProgress(cmd.ErrOrStderr())
				rep, err := job.Purge(ctx, opts, bar)
				bar.finish()
				if rep != nil {
					printPurgeReport(out, rep)
				}
				return err
			})
		},
	}
	addCellsFlag(cmd.Flags())
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "count what would go, per operation, state and day; change nothing")
	cmd.Flags().StringVar(&opts.Operation, "operation", "", "purge only this operation")
	cmd.Flags().IntVar(&opts.BatchSize, "batch", 0, "keys per batch (default 10000)")
	return cmd
}

// purgeProgress shows a purge's progress on a terminal (a spinner with counts: the total is not
// known without counting first), and nothing when stderr is not one.
type purgeProgress struct {
	bar   *progressbar.ProgressBar
	phase string
}

func newPurgeProgress(w io.Writer) *purgeProgress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &purgeProgress{}
	}
	return &purgeProgress{bar: progressbar.NewOptions64(-1, progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("purge"), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("keys"), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())}
}

// Report implements daemon.Progress.
func (p *purgeProgress) Report(phase string, done, _ int64) {
	if p.bar == nil {
		return
	}
	if phase != p.phase {
		p.phase = phase
		p.bar.Reset()
		p.bar.Describe(phase)
	}
	_ = p.bar.Set64(done)
}

func (p *purgeProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func printPurgeReport(w io.Writer, rep *retention.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if rep.DryRun {
		fmt.Fprintf(tw, "dry run %d: would delete %d keys and tombstone %d responses; nothing changed\n", rep.RunID, rep.Deleted, rep.Tombstoned)
		if len(rep.Due) > 0 {
			fmt.Fprintln(tw, "PHASE\tOPERATION\tSTATE\tCREATED\tKEYS")
		}
		for _, d := range rep.Due {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", d.Phase, d.Operation, d.State, d.Day.Format("2006-01-02"), d.N)
		}
		return
	}
	fmt.Fprintf(tw, "purge %d: deleted %d keys, tombstoned %d responses, re-stamped %d keys in %s (batch %d, %d timeouts)\n",
		rep.RunID, rep.Deleted, rep.Tombstoned, rep.Restamped, rep.FinishedAt.Sub(rep.StartedAt).Round(time.Millisecond), rep.BatchSize, rep.Timeouts)
	if !rep.Complete {
		fmt.Fprintln(tw, "more is due: the run stopped at its row limit; run it again")
	}
	rows := 0
	for _, phase := range []struct {
		name   string
		counts retention.Counts
	}{{"delete", rep.DeletedBy}, {"tombstone", rep.TombstonedBy}} {
		ops := make([]string, 0, len(phase.counts))
		for op := range phase.counts {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			for _, st := range retention.PolicyStates {
				if n := phase.counts[op][st]; n > 0 {
					if rows == 0 {
						fmt.Fprintln(tw, "PHASE\tOPERATION\tSTATE\tKEYS")
					}
					rows++
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", phase.name, op, st, n)
				}
			}
		}
	}
}

func newRetentionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "retention", Short: "Retention policies and their floor"}
	policies := &cobra.Command{Use: "policies", Short: "List, set or delete retention policies; show or set the floor (in every cell, with --cells)"}
	addCellsFlag(policies.PersistentFlags())
	cmd.AddCommand(policies)

	policies.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the policies and the floor",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onEveryCell(cmd, true, func(ctx context.Context, c cellDB, out io.Writer) error {
				set, err := retention.ListPolicies(ctx, c.DB)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				defer tw.Flush()
				fmt.Fprintf(tw, "floor: %s\n", set.Floor)
				if len(set.Policies) == 0 {
					fmt.Fprintln(tw, "no policies: keys keep the periods the claim store stamped")
					return nil
				}
				fmt.Fprintln(tw, "OPERATION\tSTATE\tKEEP RESPONSE\tKEEP KEY\tUPDATED\tBY")
				for _, p := range set.Policies {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Operation, p.State, retention.FormatPeriod(p.KeepResponse),
						retention.FormatPeriod(p.KeepKey), p.UpdatedAt.UTC().Format(time.RFC3339), p.UpdatedBy)
				}
				return nil
			})
		},
	})

	var operation, state, keepResponse, keepKey string
	set := &cobra.Command{
		Use:   "set --operation X --state S --keep-response 72h --keep-key 720h",
		Short: "Save a policy (refused below the floor)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := retention.Policy{Operation: operation, State: claim.State(state)}
			var err error
			if p.KeepResponse, err = retention.ParsePeriod(keepResponse); err != nil {
				return usagef("--keep-response: %v", err)
			}
			if p.KeepKey, err = retention.ParsePeriod(keepKey); err != nil {
				return usagef("--keep-key: %v", err)
			}
			return onEveryCell(cmd, true, func(ctx context.Context, c cellDB, out io.Writer) error {
				if err := retention.SavePolicy(ctx, c.DB, p, operatorActor()); err != nil {
					return err
				}
				fmt.Fprintf(out, "saved %s/%s: keep response %s, keep key %s (existing keys are re-stamped by the next purge)\n",
					p.Operation, p.State, retention.FormatPeriod(p.KeepResponse), retention.FormatPeriod(p.KeepKey))
				return nil
			})
		},
	}
	set.Flags().StringVar(&operation, "operation", "", "operation, or * for every operation without its own policy")
	set.Flags().StringVar(&state, "state", "", "completed, failed_final or failed_retryable")
	set.Flags().StringVar(&keepResponse, "keep-response", "", "how long the response is kept (e.g. 72h, 3d)")
	set.Flags().StringVar(&keepKey, "keep-key", "", "how long the key is kept (e.g. 720h, 30d); at least the floor")
	for _, f := range []string{"operation", "state", "keep-response", "keep-key"} {
		_ = set.MarkFlagRequired(f)
	}
	policies.AddCommand(set)

	var delOperation, delState string
	del := &cobra.Command{
		Use:   "delete --operation X --state S",
		Short: "Delete a policy (its keys fall back to '*' or keep their stamps)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onEveryCell(cmd, true, func(ctx context.Context, c cellDB, out io.Writer) error {
				if err := retention.DeletePolicy(ctx, c.DB, delOperation, claim.State(delState), operatorActor()); err != nil {
					return err
				}
				fmt.Fprintf(out, "deleted %s/%s\n", delOperation, delState)
				return nil
			})
		},
	}
	del.Flags().StringVar(&delOperation, "operation", "", "operation of the policy")
	del.Flags().StringVar(&delState, "state", "", "state of the policy")
	_ = del.MarkFlagRequired("operation")
	_ = del.MarkFlagRequired("state")
	policies.AddCommand(del)

	var retry, backfill, lag string
	floor := &cobra.Command{
		Use:   "floor [--client-retry 24h --backfill 72h --reconciliation-lag 48h]",
		Short: "Show the floor, or set it (all three parts)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed := 0
			for _, f := range []string{"client-retry", "backfill", "reconciliation-lag"} {
				if cmd.Flags().Changed(f) {
					changed++
				}
			}
			if changed != 0 && changed != 3 {
				return usagef("set the floor with all three of --client-retry, --backfill and --reconciliation-lag")
			}
			var f retention.Floor
			if changed == 3 {
				for _, part := range []struct {
					flag, v string
					d       *time.Duration
				}{{"client-retry", retry, &f.ClientRetry}, {"backfill", backfill, &f.Backfill}, {"reconciliation-lag", lag, &f.ReconciliationLag}} {
					var err error
					if *part.d, err = retention.ParsePeriod(part.v); err != nil {
						return usagef("--%s: %v", part.flag, err)
					}
				}
			}
			return onEveryCell(cmd, true, func(ctx context.Context, c cellDB, out io.Writer) error {
				if changed == 3 {
					if err := retention.SetFloor(ctx, c.DB, f, operatorActor()); err != nil {
						return err
					}
				}
				f, err := retention.GetFloor(ctx, c.DB)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "floor: %s\n", f)
				return nil
			})
		},
	}
	floor.Flags().StringVar(&retry, "client-retry", "", "the clients' retry window")
	floor.Flags().StringVar(&backfill, "backfill", "", "the manual back-fill window")
	floor.Flags().StringVar(&lag, "reconciliation-lag", "", "how late reconciliation findings arrive")
	policies.AddCommand(floor)
	return cmd
}

func newHoldCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "hold", Short: "Put a key on legal hold (never purged) or lift the hold"}
	for _, action := range []string{"set", "lift"} {
		var keyID int64
		var reason string
		sub := &cobra.Command{
			Use:   action + " --key-id N --reason R",
			Short: map[string]string{"set": "Put a key on legal hold", "lift": "Lift a key's legal hold"}[action],
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if keyID <= 0 {
					return usagef("--key-id must be a positive key id")
				}
				var changed bool
				if err := inKeysCell(cmd, func(ctx context.Context, db *gorm.DB) (err error) {
					changed, err = retention.SetLegalHold(ctx, db, keyID, action == "set", operatorActor(), reason)
					return err
				}); err != nil {
					return err
				}
				state := map[bool]string{true: "on legal hold", false: "not on legal hold"}[action == "set"]
				if !changed {
					fmt.Fprintf(cmd.OutOrStdout(), "key %s was already %s\n", strconv.FormatInt(keyID, 10), state)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "key %d is now %s\n", keyID, state)
				return nil
			},
		}
		addCellsFlag(sub.Flags())
		sub.Flags().Int64Var(&keyID, "key-id", 0, "the key's id")
		sub.Flags().StringVar(&reason, "reason", "", "why (recorded in the key's history)")
		_ = sub.MarkFlagRequired("key-id")
		_ = sub.MarkFlagRequired("reason")
		cmd.AddCommand(sub)
	}
	return cmd
}
