package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/retention"
)

// TestFileArgs_MissingOrUnreadableFileExits2 runs every command that reads a file named by a flag
// or an argument with a file that is not there and with a folder: each exits 2 with one line
// naming the file, before any database is opened (the database URL given leads nowhere: reaching
// it would fail with exit 1).
func TestFileArgs_MissingOrUnreadableFileExits2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	statement := filepath.Join(statements, "wechat/all_trades.csv")
	nowhere := []string{"--database-url", "postgres://idemops@127.0.0.1:1/none?connect_timeout=1", "--data-dir", filepath.Join(dir, "data")}
	for _, bad := range []string{missing, dir} {
		for _, args := range [][]string{
			{"reconcile", "parse", "--format", "wechat", bad},
			{"reconcile", "parse", "--profile", bad, statement},
			{"reconcile", "import", "--channel", "wechat", "--format", "wechat", bad},
			{"reconcile", "import", "--channel", "wechat", "--profile", bad, statement},
			{"console", "--operations", bad},
			{"daemon", "--operations", bad},
			{"serve", "--operations", bad},
			{"jobs", "run", "purge", "--operations", bad},
		} {
			wantBadInput(t, bad, append(args, nowhere...)...)
		}
	}
}

// wantBadInput runs idemops with args and wants it refused as bad input: exit 2, one line
// containing want.
func wantBadInput(t *testing.T, want string, args ...string) {
	t.Helper()
	_, err := runIdemops(t, args...)
	if err == nil || exitCode(err) != 2 || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), want) {
		t.Errorf("%v: %v (exit %d); want exit 2, one line containing %q", args, err, exitCode(err), want)
	}
}

// TestExitCode_OneTableForEveryPackage: the exit code comes from the kind an error carries,
// whichever package it comes from and however it is wrapped: bad input (invalid, not found, a
// conflict with what exists) 2, anything else 1.
func TestExitCode_OneTableForEveryPackage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{usagef("--batch must be positive"), 2},
		{fmt.Errorf("recon job x: %w", reconcile.ErrInvalid), 2},
		{fmt.Errorf("run 9: %w", reconcile.ErrNotFound), 2},
		{fmt.Errorf("schedule: %w", daemon.ErrInvalidSchedule), 2},
		{daemon.ErrUnknownJob, 2},
		{errs.Fieldf("keep_key", "below the floor").Of(retention.ErrBelowFloor), 2},
		{errs.Fieldf("reason", "required").Of(keys.ErrInvalidHold), 2},
		{fmt.Errorf("key 7: %w", claim.ErrNotFound), 2},
		{&reconcile.LineError{Line: 3, Reason: "bad amount"}, 1},
		{reconcile.ErrArchive, 1},
		{fmt.Errorf("operator alice: %w", access.ErrConflict), 2},
		{fmt.Errorf("fetch: %w", reconcile.ErrFetch), 1},
		{&pgconn.PgError{Code: "42P01", Message: `relation "job_runs" does not exist`}, 1},
		{fmt.Errorf("plain failure"), 1},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d; want %d", tt.err, got, tt.want)
		}
	}
	if got := explain(fmt.Errorf("list: %w", &pgconn.PgError{Code: "42P01", Message: `relation "job_runs" does not exist`})).Error(); !strings.Contains(got, "run `idemops migrate up` first") {
		t.Errorf("a missing table explains itself as %q", got)
	}
}
