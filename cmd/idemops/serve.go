package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/daemon"
)

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the console and a daemon replica in one process (private PostgreSQL unless DATABASE_URL is set)",
		Long: `serve applies pending migrations, then runs the operator console (web UI, /api/v1, /metrics)
and a daemon replica (leader election, schedules, reclaimer, outbox relay, reconciliation,
retention) until SIGINT/SIGTERM. Operations for the reclaimer and "check downstream" come
from --operations (YAML, see downstream/testdata/paysim-ops.yaml).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			addr, _ := cmd.Flags().GetString("addr")
			secure, _ := cmd.Flags().GetBool("secure-cookies")
			ops, err := loadOperations(cmd)
			if err != nil {
				return err
			}
			d, err := openDatabase(ctx, cmd, true, true)
			if err != nil {
				return err
			}
			defer d.Close()
			secret, err := digestSecret(cmd, d)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			store, err := claim.NewStore(d.DB, claim.Config{DigestSecret: secret, Logger: log})
			if err != nil {
				return err
			}
			rcfg, err := reconSources(cmd, secret)
			if err != nil {
				return err
			}
			cdb, err := d.ConsoleDB(ctx)
			if err != nil {
				return err
			}
			ccfg := console.Config{DB: cdb, Claims: store, Operations: operationSet{ops}.Get,
				SecureCookies: secure, Logger: log, Reconcile: rcfg}
			if err := ssoConfig(cmd, &ccfg); err != nil {
				return err
			}
			closeCells, err := consoleCells(ctx, d, claim.Config{DigestSecret: secret, Logger: log}, &ccfg)
			if err != nil {
				return err
			}
			defer closeCells()
			srv, err := console.New(ccfg)
			if err != nil {
				return err
			}
			defer srv.Close() // bulk replays stop between keys
			deps := daemonDeps{DB: d.DB, Store: store, Operations: operationSet{ops},
				Replays: srv.Replays(), Registerer: srv.Registerer(), Logger: log, Recon: rcfg}
			dopt := daemonOptions{Daemon: daemon.Config{Name: flagOrEnv(cmd, "replica", "IDEMOPS_REPLICA")}}
			set, err := d.Cells(ctx, claim.Config{DigestSecret: secret, Logger: log})
			if err != nil {
				return err
			}
			var stopDaemon func()
			if set == nil {
				stopDaemon, err = startDaemon(ctx, deps, dopt)
			} else { // one replica per cell, each its own leader and jobs
				stopDaemon, err = startCellDaemons(ctx, deps, set, dopt)
			}
			if err != nil {
				return err
			}
			defer stopDaemon()
			url, stop, err := listenAndServe(addr, "addr", srv.Handler())
			if err != nil {
				return err
			}
			defer stop()
			if list, err := srv.Operators().List(ctx); err == nil && len(list) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "idemops: no operators yet; create one with: idemops user add NAME --role admin --tenants '*'")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "console %s; daemon replica running (operations: %v)\n", url, ops.Names())
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.String("addr", "127.0.0.1:8080", "console listen address")
	f.Bool("secure-cookies", false, "mark cookies Secure (behind a TLS-terminating proxy)")
	f.String("operations", "", "YAML file of downstream operations (env IDEMOPS_OPERATIONS)")
	f.String("digest-secret", "", "deployment secret for key digests (env IDEMOPS_DIGEST_SECRET)")
	addSSOFlags(f)
	f.String("replica", "", "replica name (env IDEMOPS_REPLICA; default: the host name)")
	addCellsFlag(f)
	return cmd
}
