package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/chaos/report"
)

// newChaosReportCmd redraws a run's page from its report.json: after the page's drawing
// changes, or from a report copied off another machine.
func newChaosReportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report --from DIR/report.json [--out DIR]",
		Short: "Draw a chaos run's report.html from its report.json",
		Long: `Read a chaos run's report.json and draw its self-contained page, report.html, into --out
(the JSON's own folder when --out is not given). report.json is not rewritten.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("chaos report takes no arguments (got %q): name the file with --from", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, _ := cmd.Flags().GetString("from")
			out, _ := cmd.Flags().GetString("out")
			if from == "" {
				return usagef("--from is required: the report.json of a chaos run")
			}
			if out == "" {
				out = filepath.Dir(from)
			}
			r, err := report.Read(from)
			if errors.Is(err, report.ErrInvalid) {
				return usagef("--from: %v", err)
			} else if err != nil {
				return err
			}
			if err := report.WriteHTML(out, r); err != nil {
				return err
			}
			verdict := "FAILED"
			if report.Headline(r) {
				verdict = "PASSED"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (seed %d)\n", filepath.Join(out, "report.html"), verdict, r.Seed)
			return nil
		},
	}
	cmd.Flags().String("from", "", "the run's report.json")
	cmd.Flags().String("out", "", "folder to draw report.html in (default: the folder of --from)")
	return cmd
}
