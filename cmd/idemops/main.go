// Command idemops is the operations side of an idempotency-key system: the daemon, the console,
// and the tools around them, in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
	"github.com/idemops/idemops/internal/telemetry"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Traces go out over OTLP when the standard OTEL_EXPORTER_OTLP_* variables say where.
	flush, err := telemetry.Setup(ctx, "idemops")
	if err != nil {
		fmt.Fprintln(os.Stderr, "idemops:", err)
		os.Exit(2)
	}
	err = execute(ctx, newRoot())
	stop()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = flush(fctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idemops:", oneLine(explain(err)))
		os.Exit(exitCode(err))
	}
}

// usageError marks bad input from the command line: a flag, an argument, a file named by one.
type usageError struct{ error }

// ErrorKind is invalid: exit 2.
func (usageError) ErrorKind() errs.Kind { return errs.Invalid }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode is the one exit-code decision, applied once, in main: the kind an error carries (a
// usageError, or any package's error) looked up in errs' table — 2 for bad input (invalid, not
// found, conflicting with what exists), 1 for a failure.
func exitCode(err error) int { return errs.Exit(err) }

// explain says in one line what a missing table means (an unmigrated database), for every
// command; other errors are left as they are.
func explain(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42P01" {
		return fmt.Errorf("the database's tables are missing (%s): run `idemops migrate up` first", pg.Message)
	}
	return err
}

// fileArg turns a failure to open or read the file a flag or argument names (missing, a folder,
// unreadable) into bad input, exit 2; what the file says is judged by its reader.
func fileArg(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return usageError{err}
	}
	return err
}

// execute runs root. An error cobra returns before any command ran — an unknown command, a
// wrong number of arguments, a missing, unknown or malformed flag — is bad input (exit 2), like
// a command's own usage errors.
func execute(ctx context.Context, root *cobra.Command) error {
	ran := false
	var mark func(c *cobra.Command)
	mark = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { ran = true; return run(cmd, args) }
		}
		if run := c.Run; run != nil {
			c.Run = func(cmd *cobra.Command, args []string) { ran = true; run(cmd, args) }
		}
		for _, sub := range c.Commands() {
			mark(sub)
		}
	}
	mark(root)
	err := root.ExecuteContext(ctx)
	var ue usageError
	if err != nil && !ran && !errors.As(err, &ue) {
		err = usageError{err}
	}
	return err
}

// oneLine puts an error on one line without losing what follows a line break: a driver's
// connection error names the host on its first line and the reason on the next.
func oneLine(err error) string {
	var b strings.Builder
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

// checkFlagText refuses a flag or argument holding a NUL byte or bytes that are not UTF-8 (exit 2
// naming it), before any command runs: such text would only fail later, inside PostgreSQL.
func checkFlagText(cmd *cobra.Command, args []string) error {
	var bad error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if bad == nil {
			if p := inputcheck.Problem(f.Value.String()); p != "" {
				bad = usagef("--%s: %s", f.Name, p)
			}
		}
	})
	if bad != nil {
		return bad
	}
	for i, a := range args {
		if p := inputcheck.Problem(a); p != "" {
			return usagef("argument %d: %s", i+1, p)
		}
	}
	return nil
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "idemops",
		Short:         "Operations for idempotency keys: daemon, console, reconciliation, retention",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("database-url", "", "PostgreSQL connection string (env DATABASE_URL); unset: a private cluster under --data-dir")
	root.PersistentFlags().String("data-dir", ".idemops", "the folder that holds everything local: the private PostgreSQL (in pg/, when no database URL is given), the digest secret and the demo's paysim state (env IDEMOPS_DATA_DIR)")
	addReconSourceFlags(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error { return checkFlagText(cmd, args) }
	root.AddCommand(newMigrateCmd())
	root.AddCommand(newDaemonCmd(), newJobsCmd())
	root.AddCommand(newReconcileCmd())
	root.AddCommand(newConsoleCmd(), newUserCmd(), newAuditCmd())
	root.AddCommand(newDemoCmd(), newServeCmd())
	root.AddCommand(newChaosCmd(), newChaosPartCmd())
	root.AddCommand(newPurgeCmd(), newRetentionCmd(), newHoldCmd())
	root.AddCommand(newKeysCmd(), newReplayCmd(), newFindingsCmd())
	root.AddCommand(newCellsCmd())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group (a command with subcommands and nothing to
// run itself) print its help when called alone and refuse anything else as an unknown command:
// cobra would print the help and exit 0 for `idemops keys serch`.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasParent() && c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
