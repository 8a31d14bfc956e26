package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/migrations"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "Apply, roll back (one step) or list the schema migrations",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "status") {
				return usagef("migrate takes one of: up, down, status")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			d, err := openDatabase(ctx, cmd, true, false)
			if err != nil {
				return err
			}
			defer d.Close()
			sqlDB, _ := d.DB.DB()
			p, err := migrations.Provider(sqlDB)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch args[0] {
			case "up":
				res, err := p.Up(ctx)
				for _, r := range res {
					fmt.Fprintf(out, "applied %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
				}
				if err == nil && len(res) == 0 {
					fmt.Fprintln(out, "schema is up to date")
				}
				return err
			case "down":
				r, err := p.Down(ctx)
				if r != nil {
					fmt.Fprintf(out, "rolled back %s\n", r.Source.Path)
				}
				return err
			default:
				st, err := p.Status(ctx)
				for _, s := range st {
					at := "pending"
					if !s.AppliedAt.IsZero() {
						at = "applied " + s.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
					}
					fmt.Fprintf(out, "%-28s %s\n", s.Source.Path, at)
				}
				return err
			}
		},
	}
	return cmd
}
