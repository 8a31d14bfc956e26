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
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
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

func oneLine(err error) string {
	s := err.Error()
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error { return checkFlagText(cmd, args) }
	root.AddCommand(newMigrateCmd())
	root.AddCommand(newDaemonCmd(), newJobsCmd())
	root.AddCommand(newReconcileCmd())
	root.AddCommand(newConsoleCmd(), newUserCmd(), newAuditCmd())
	root.AddCommand(newDemoCmd(), newServeCmd())
	root.AddCommand(newChaosCmd(), newChaosPartCmd())
	root.AddCommand(newPurgeCmd(), newRetentionCmd(), newHoldCmd())
	return root
}
