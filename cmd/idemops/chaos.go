package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/chaos"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/reconcile"
)

func newChaosCmd() *cobra.Command {
	var (
		duration time.Duration
		seed     int64
		out      string
		rate     float64
		ha       bool
		ncells   int
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run the demo world as separate processes under a seeded fault schedule; check the invariants; write a report",
		Long: `chaos starts a private PostgreSQL and RabbitMQ, a durable paysim, two payments-service replicas
behind a loopback round-robin proxy, two daemon replicas and the console, each a process of its
own (this binary, re-executed). It sends idempotent client traffic for --duration while a fault
schedule drawn from --seed kills replicas, the daemon leader and the broker, makes paysim fail,
drop answers, slow down and misdeliver callbacks, and has operators replay, purge and reconcile.
Then it lets the world settle, checks the invariants against the store and paysim, and writes
report.json (and report.html) under --out. Exit 0: every invariant held; 1: one did not (the
violations name key digests); 2: bad flags. The same seed gives the same fault schedule.
--cells 2 splits the tenants over two cells (acme in a, globex in b), each its own PostgreSQL,
and checks the invariants in each cell.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case duration < 10*time.Second || duration > 24*time.Hour:
				return usagef("--duration: must be between 10s and 24h, got %v", duration)
			case seed < 0:
				return usagef("--seed: must not be negative, got %d", seed)
			case strings.TrimSpace(out) == "":
				return usagef("--out: must name a folder")
			case !(rate > 0 && rate <= 100):
				return usagef("--rate: must be in (0, 100], got %v", rate)
			case ncells < 1 || ncells > chaos.MaxCells:
				return usagef("--cells: must be 1 or %d (the run's two tenants split over the cells), got %d", chaos.MaxCells, ncells)
			}
			if st, err := os.Stat(out); err == nil && !st.IsDir() {
				return usagef("--out: %s is a file, not a folder", out)
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("chaos: find this binary: %w", err)
			}
			r, err := chaos.Run(cmd.Context(), chaos.Config{Binary: bin, Duration: duration, Seed: seed, OutDir: out,
				Rate: rate, HA: ha, Cells: ncells, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), chaos.Summary(r, out))
			if !r.Passed {
				return errors.New("chaos: an invariant did not hold (see " + out + "/report.json)")
			}
			return nil
		},
	}
	cmd.AddCommand(newChaosReportCmd())
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", 5*time.Minute, "how long traffic and faults run (10s–24h)")
	f.Int64Var(&seed, "seed", 1, "seed of the fault schedule and the traffic (same seed, same schedule)")
	f.StringVar(&out, "out", "chaos-report", "folder the report is written to")
	f.Float64Var(&rate, "rate", 8, "new logical payments per second")
	f.IntVar(&ncells, "cells", 1, "split the tenants over this many cells (1 or 2), each its own PostgreSQL (a pg_auto_failover pair with --ha, one cell's primary killed) under a cell map the run writes; every part runs with --cells")
	f.BoolVar(&ha, "ha", true, "PostgreSQL as the pg_auto_failover HA set, its primary killed once (falls back to a single cluster, named in the report, when the set cannot start)")
	return cmd
}

// newChaosPartCmd is the hidden family of one-part processes the chaos runner starts. Each
// prints "READY <url>" once it serves and runs until SIGTERM (or SIGKILL, the point).
func newChaosPartCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "chaos-part", Hidden: true, Short: "one part of the chaos world (started by idemops chaos)"}
	cmd.AddCommand(chaosPaysimCmd(), chaosPaymentsCmd(), chaosDaemonCmd(), chaosConsoleCmd())
	return cmd
}

func chaosPaysimCmd() *cobra.Command {
	var addr, stateFile, notifyURL string
	var seed int64
	cmd := &cobra.Command{Use: "paysim", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		// Callbacks are retried every 5 s for about 2.5 minutes (paysim's default backs off to
		// an hour): an outage of the whole world is answered within the run's bounded settle.
		schedule := []time.Duration{time.Second, 2 * time.Second}
		for len(schedule) < 32 {
			schedule = append(schedule, 5*time.Second)
		}
		sim, err := paysim.NewServer(paysim.Config{Seed: seed, NotifySchedule: schedule, StateFile: stateFile, NotifyURL: notifyURL,
			NotifySecret: []byte(os.Getenv(chaos.EnvNotifySecret)), DeclinePayees: []string{"declined-shop"}, Logger: log,
			// Callback faults decided from the seed on top of the ones the schedule forces.
			NotifyDuplicateRate: 0.05, NotifyReorderRate: 0.03, LateCloseRate: 0.03, NotifyDelay: time.Second})
		if err != nil {
			return err
		}
		defer sim.Close() // saves the state file
		url, stop, err := serveHTTP(addr, sim)
		if err != nil {
			return err
		}
		defer stop()
		return readyAndWait(cmd, url)
	}}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address")
	cmd.Flags().StringVar(&stateFile, "state-file", "", "paysim's durable state")
	cmd.Flags().StringVar(&notifyURL, "notify-url", "", "where callbacks go")
	cmd.Flags().Int64Var(&seed, "seed", 1, "seed of paysim's own fault decisions")
	return cmd
}

// chaosWorld opens the shared database and builds the demo world's operations against the
// paysim process; serve says whether this part is a payments replica. With --cells (a run of
// `idemops chaos --cells 2`) the database is the control cell's, every cell is opened, and the
// payments route each tenant to its cell's store (the store returned is the control cell's).
func chaosWorld(cmd *cobra.Command, owner, apiAddr, grpcAddr string, serve bool) (*database, *claim.Store, *demo.World, error) {
	ctx := cmd.Context()
	d, err := openDatabase(ctx, cmd, false, false)
	if err != nil {
		return nil, nil, nil, err
	}
	secret, err := digestSecret(cmd, d)
	if err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ccfg := claim.Config{DigestSecret: secret, Logger: log, Owner: owner, LeaseTTL: chaos.LeaseTTL, Quarantine: chaos.Quarantine}
	set, err := d.Cells(ctx, ccfg)
	if err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	var store *claim.Store
	var stores func(string) (*claim.Store, error)
	var cellStores func() map[string]*claim.Store
	if set != nil {
		store, stores, cellStores = set.Control().Store, set.StoreFor, set.Stores
	} else if store, err = claim.NewStore(d.DB, ccfg); err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	keys := map[string]string{}
	for _, kv := range strings.Split(os.Getenv(chaos.EnvAPIKeys), ",") {
		if k, t, ok := strings.Cut(kv, "="); ok {
			keys[k] = t
		}
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: d.DB, Store: store, PaysimURL: os.Getenv(chaos.EnvPaysimURL),
		APIAddr: apiAddr, GRPCAddr: grpcAddr, APIKeys: keys, NoServe: !serve, Stores: stores, Cells: cellStores, LedgerURL: os.Getenv(chaos.EnvLedgerURL), AMQPURL: os.Getenv("AMQP_URL"), Logger: log,
		Paysim: paysim.Config{NotifySecret: []byte(os.Getenv(chaos.EnvNotifySecret))}})
	if err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	return d, store, w, nil
}

func chaosPaymentsCmd() *cobra.Command {
	var addr, grpcAddr, name string
	cmd := &cobra.Command{Use: "payments", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		d, _, w, err := chaosWorld(cmd, "service:"+name, addr, grpcAddr, true)
		if err != nil {
			return err
		}
		defer d.Close()
		defer w.Close()
		return readyAndWait(cmd, w.APIURL)
	}}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address")
	cmd.Flags().StringVar(&grpcAddr, "grpc-addr", "127.0.0.1:0", "gRPC listen address")
	cmd.Flags().StringVar(&name, "name", "payments", "replica name")
	addCellsFlag(cmd.Flags())
	return cmd
}

func chaosDaemonCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{Use: "daemon", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		d, store, w, err := chaosWorld(cmd, "daemon:"+name, "", "", false)
		if err != nil {
			return err
		}
		defer d.Close()
		defer w.Close()
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		rcfg, err := reconSources(cmd, store.Config().DigestSecret, w.PaysimURL) // the run's paysim, on loopback
		if err != nil {
			return err
		}
		deps := daemonDeps{DB: d.DB, Store: store, Operations: operationSet{w.Operations}, Senders: w.Senders(), Logger: log, Recon: rcfg}
		opt := daemonOptions{Daemon: daemon.Config{Name: name, LeaseTTL: 4 * time.Second, RenewEvery: time.Second},
			Outbox:      daemon.OutboxConfig{SendTimeout: chaos.OutboxSendTimeout, Workers: chaos.OutboxWorkers, Quarantine: chaos.OutboxQuarantine},
			ReclaimSpec: "@every 3s", OutboxSpec: "@every 2s"}
		var stop func()
		if d.cells == nil {
			stop, err = startDaemon(cmd.Context(), deps, opt)
		} else { // a replica per cell in this process, each its own leader and jobs
			stop, err = startCellDaemons(cmd.Context(), deps, d.cells, opt)
		}
		if err != nil {
			return err
		}
		defer stop()
		return readyAndWait(cmd, name)
	}}
	cmd.Flags().StringVar(&name, "name", "daemon", "replica name")
	addCellsFlag(cmd.Flags())
	return cmd
}

func chaosConsoleCmd() *cobra.Command {
	var addr, tokens string
	cmd := &cobra.Command{Use: "console", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		d, store, w, err := chaosWorld(cmd, "console", "", "", false)
		if err != nil {
			return err
		}
		defer d.Close()
		defer w.Close()
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		rcfg, err := reconSources(cmd, store.Config().DigestSecret, w.PaysimURL)
		if err != nil {
			return err
		}
		cdb, err := d.ConsoleDB(ctx)
		if err != nil {
			return err
		}
		ccfg := console.Config{DB: cdb, Claims: store, Operations: operationSet{w.Operations}.Get, Logger: log,
			KeyPanels: []console.KeyPanelFunc{w.Orders.KeyPanel}, Reconcile: rcfg}
		closeCells, err := consoleCells(ctx, d, store.Config(), &ccfg) // nothing without --cells
		if err != nil {
			return err
		}
		defer closeCells()
		srv, err := console.New(ccfg)
		if err != nil {
			return err
		}
		defer srv.Close()
		// Two operators: a replay of a large amount needs a second one to approve it.
		var lines []string
		for _, name := range []string{"chaos-a", "chaos-b"} {
			change := access.Change{Actor: "operator:chaos"}
			_, err := srv.Operators().Add(ctx, change, access.NewOperator{Name: name, Password: "chaos-" + randomToken(12),
				Role: access.RoleAdmin, Tenants: []string{access.AllTenants}})
			if err != nil && !errors.Is(err, access.ErrConflict) {
				return fmt.Errorf("chaos operator: %w", err)
			}
			tok, err := srv.Operators().CreateToken(ctx, change, name, "chaos-"+randomToken(6), time.Hour)
			if err != nil {
				return fmt.Errorf("chaos token: %w", err)
			}
			lines = append(lines, tok)
		}
		if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return err
		}
		if err := chaosReconJob(ctx, d, store, w, rcfg); err != nil {
			return err
		}
		url, stop, err := listenAndServe(addr, "addr", srv.Handler())
		if err != nil {
			return err
		}
		defer stop()
		return readyAndWait(cmd, url)
	}}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address")
	cmd.Flags().StringVar(&tokens, "tokens-file", "", "file the two operators' API tokens are written to")
	addCellsFlag(cmd.Flags())
	return cmd
}

// chaosReconJob reconciles today's paysim Stripe statement (UTC days; the charges the demo
// service makes through its Stripe account, demo.ChannelRoutes, and the keys recorded there),
// fees checked. The runner starts it through the console (recon schedule reconcile:chaos-stripe).
func chaosReconJob(ctx context.Context, d *database, store *claim.Store, w *demo.World, rcfg reconcile.Config) error {
	rcfg.Store, rcfg.Operations = store, operationSet{w.Operations}
	rec, err := reconcile.New(d.DB, rcfg)
	if err != nil {
		return err
	}
	spec := reconcile.JobSpec{Name: chaos.ReconJob, Channel: demo.AccountStripe, Format: "stripe",
		Source: w.PaysimURL + "/statements/{date}?format=stripe", Operations: []string{demo.OperationCharge},
		CronSpec: "@every 1m", TimeZone: "UTC", Enabled: true, GraceSeconds: 300, ReadyDeadlineSeconds: 60,
		FeeSchedule: &reconcile.FeeSchedule{RateBP: "60", Refunds: "kept"}}
	_, err = rec.UpdateJob(ctx, spec.Name, spec)
	if errors.Is(err, reconcile.ErrNotFound) {
		_, err = rec.CreateJob(ctx, spec)
	}
	return err
}

// serveHTTP serves h on addr (any handler, no timeouts beyond the header's).
func serveHTTP(addr string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func readyAndWait(cmd *cobra.Command, what string) error {
	fmt.Fprintf(cmd.OutOrStdout(), "READY %s\n", what)
	<-cmd.Context().Done()
	return nil
}
