package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/migrations"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate up|down|status [--cells FILE]",
		Short: "Apply, roll back (one step) or list the schema migrations (of every cell, with a cell map)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "status") {
				return usagef("migrate takes one of: up, down, status")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			m, err := cellMap(cmd)
			if err != nil {
				return err
			}
			if m == nil {
				d, err := openDatabase(ctx, cmd, true, false)
				if err != nil {
					return err
				}
				defer d.Close()
				sqlDB, _ := d.DB.DB()
				return migrateSchema(ctx, out, sqlDB, args[0])
			}
			// Every cell, the control cell among them, in the map's order; the first that fails
			// stops the rest, named (those before it stay migrated: run it again once it is fixed).
			for _, c := range m.Cells() {
				if err := migrateCell(ctx, out, c.Name, c.URL, args[0]); err != nil {
					return fmt.Errorf("cell %s: %w", c.Name, err)
				}
			}
			return nil
		},
	}
	addCellsFlag(cmd.Flags())
	return cmd
}

// migrateCell runs action on one cell's database, its lines prefixed with the cell's name.
func migrateCell(ctx context.Context, out io.Writer, name, url, action string) error {
	db, err := openPool(url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	return migrateSchema(ctx, &prefixWriter{w: out, prefix: "cell " + name + ": "}, sqlDB, action)
}

// migrateSchema applies (up), rolls back one step of (down) or lists (status) db's migrations.
func migrateSchema(ctx context.Context, out io.Writer, db *sql.DB, action string) error {
	p, err := migrations.Provider(db)
	if err != nil {
		return err
	}
	switch action {
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
}

// prefixWriter writes every line it is given with prefix in front (each Write is whole lines,
// as fmt.Fprintf of a line is).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
