package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/retention"
)

// Default schedules of the daemon's own jobs (operators may change them in the schedules table).
const (
	reclaimSpec = "@every 15s"
	outboxSpec  = "@every 5s"
	purgeSpec   = "@every 1h"
)

// daemonDeps is what the daemon's jobs run against.
type daemonDeps struct {
	DB    *gorm.DB
	Store *claim.Store
	// Operations finds a key's Operation for the reclaimer (downstream.Registry from
	// --operations; the demo's registry in `idemops demo`). A key whose operation is unknown is
	// parked with a backoff and, after a few tries, flagged "needs attention".
	Operations daemon.Operations
	// Senders deliver outbox rows by operation; a row with no sender fails visibly after its
	// attempts ("no sender registered").
	Senders daemon.Senders
	// Replays is the replay workflow the bulk replay job runs on: the console's, when the
	// console runs in the same process (serve, demo); else one is made on DB and Store.
	Replays *replay.Workflow
	// Audit is the audit log the jobs' actions (findings bulk runs, replays) append to; nil: DB's
	// own. A cell's replica gets the control cell's (cellDeps): one chain for the deployment.
	Audit      *audit.Log
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Recon is where statements may be fetched from and the keyring of channel credentials
	// (reconSources); its other fields are filled here.
	Recon reconcile.Config
}

// daemonOptions are the tunables the flags set.
type daemonOptions struct {
	Daemon  daemon.Config
	Reclaim daemon.ReclaimConfig
	Outbox  daemon.OutboxConfig
	// ReclaimSpec and OutboxSpec replace the default schedules of those jobs (the chaos run's
	// daemons reclaim every few seconds so that the world settles quickly).
	ReclaimSpec, OutboxSpec string
}

// newDaemon builds a replica with every job registered. It is the one place jobs are wired in:
// reconciliation and retention jobs are added here too (d.Register(job, spec)).
func newDaemon(deps daemonDeps, opt daemonOptions) (*daemon.Daemon, error) {
	if deps.Operations == nil {
		deps.Operations = daemon.NoOperations{}
	}
	if deps.Senders == nil {
		deps.Senders = daemon.SenderMap{}
	}
	opt.Daemon.DB, opt.Daemon.Registerer, opt.Daemon.Logger = deps.DB, deps.Registerer, deps.Logger
	opt.Reclaim.Logger, opt.Outbox.Logger = deps.Logger, deps.Logger
	d, err := daemon.New(opt.Daemon)
	if err != nil {
		return nil, err
	}
	reclaim, err := daemon.NewReclaimJob(deps.Store, deps.Operations, opt.Reclaim)
	if err != nil {
		return nil, err
	}
	relay, err := daemon.NewOutboxRelay(deps.DB, deps.Senders, opt.Outbox)
	if err != nil {
		return nil, err
	}
	if err := d.Register(reclaim, cmp.Or(opt.ReclaimSpec, reclaimSpec)); err != nil {
		return nil, err
	}
	if err := d.Register(relay, cmp.Or(opt.OutboxSpec, outboxSpec)); err != nil {
		return nil, err
	}
	purge, err := retention.NewPurgeJob(deps.DB, retention.Config{Logger: deps.Logger})
	if err != nil {
		return nil, err
	}
	if err := d.Register(purge, purgeSpec); err != nil {
		return nil, err
	}
	// Reconciliation runs from one schedule per recon job (kept in step by the reconcile
	// package), so it has no default schedule of its own.
	rcfg := deps.Recon
	rcfg.Store, rcfg.Operations, rcfg.Logger = deps.Store, deps.Operations, deps.Logger
	if deps.Audit == nil {
		deps.Audit = audit.New(deps.DB, deps.Store.Config().DigestSecret)
	}
	// Bulk runs of findings audit every finding they change, in the batch's transaction (or,
	// for a cell other than the control, just before it commits: audit.Log.Elsewhere).
	rcfg.Auditor = reconcile.LogAuditor{Log: deps.Audit, DB: deps.DB}
	rec, err := reconcile.New(deps.DB, rcfg)
	if err != nil {
		return nil, err
	}
	rekeyCredentials(rec, deps.Logger)
	if err := d.Register(reconcile.NewJob(rec), ""); err != nil {
		return nil, err
	}
	// Bulk resolve, ignore and recover of findings started in any console run here.
	if err := d.Register(reconcile.NewBulkJob(rec), reconcile.BulkJobSpec); err != nil {
		return nil, err
	}
	// Bulk replays started in any console run here, as jobs (replay.BulkJob).
	if deps.Replays == nil {
		if deps.Replays, err = replay.New(replay.Config{DB: deps.DB, Claims: deps.Store, Operations: deps.Operations.Get,
			Audit: deps.Audit, Logger: deps.Logger}); err != nil {
			return nil, err
		}
	}
	if err := d.Register(replay.NewBulkJob(deps.Replays), replay.BulkJobSpec); err != nil {
		return nil, err
	}
	return d, nil
}

// addDaemonFlags declares the flags `daemon` and `jobs run` share.
func addDaemonFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("digest-secret", "", "deployment secret for key digests, at least 16 bytes (env IDEMOPS_DIGEST_SECRET; generated beside the private cluster when unset)")
	f.String("operations", "", "YAML file of the downstream operations keys use (env IDEMOPS_OPERATIONS; see downstream/testdata/paysim-ops.yaml)")
	f.Int("reclaim-batch", 100, "expired leases taken over per statement")
	f.Int("reclaim-max", 10000, "expired leases taken over per run at most")
	f.Int("reclaim-workers", 4, "keys driven concurrently within a batch")
	f.Int("outbox-batch", 100, "outbox rows claimed per statement")
	f.Int("outbox-workers", 4, "outbox rows sent concurrently within a batch")
	f.Int("outbox-attempts", 10, "sends per outbox row before it is failed")
}

// daemonSetup opens the database and builds the replica from the flags: with a cell map, one
// replica per cell (newCellDaemons), in the map's order.
func daemonSetup(cmd *cobra.Command, migrate bool, opt daemonOptions, reg prometheus.Registerer) (*database, replicas, error) {
	ctx := cmd.Context()
	ops, err := loadOperations(cmd)
	if err != nil {
		return nil, nil, err
	}
	f := cmd.Flags()
	opt.Reclaim.BatchSize, _ = f.GetInt("reclaim-batch")
	opt.Reclaim.MaxPerRun, _ = f.GetInt("reclaim-max")
	opt.Reclaim.Workers, _ = f.GetInt("reclaim-workers")
	opt.Outbox.BatchSize, _ = f.GetInt("outbox-batch")
	opt.Outbox.Workers, _ = f.GetInt("outbox-workers")
	opt.Outbox.MaxAttempts, _ = f.GetInt("outbox-attempts")

	d, err := openDatabase(ctx, cmd, true, migrate)
	if err != nil {
		return nil, nil, err
	}
	secret, err := digestSecret(cmd, d)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	store, err := claim.NewStore(d.DB, claim.Config{DigestSecret: secret, Owner: "daemon:" + opt.Daemon.Name, Logger: logger})
	if err != nil {
		d.Close()
		return nil, nil, usageError{err}
	}
	rcfg, err := reconSources(cmd, secret)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	deps := daemonDeps{DB: d.DB, Store: store, Operations: operationSet{ops}, Registerer: reg, Logger: logger, Recon: rcfg}
	set, err := d.Cells(ctx, claim.Config{DigestSecret: secret, Owner: "daemon:" + opt.Daemon.Name, Logger: logger})
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	var ds replicas
	if set == nil {
		var dm *daemon.Daemon
		if dm, err = newDaemon(deps, opt); err == nil {
			ds = replicas{{Daemon: dm, log: logger}}
		}
	} else {
		ds, err = newCellDaemons(deps, set, opt)
	}
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, ds, nil
}

// replicas are the daemon replicas of one process: one, or one per cell.
type replicas []*replica

// replica is one daemon replica; with a cell map, of cell, which it starts with (Start).
type replica struct {
	*daemon.Daemon
	cell *cells.Cell
	log  *slog.Logger

	mu      sync.Mutex // held while a late start starts
	stopped bool
}

// Start starts every replica; on a failure the ones started are stopped. The replica of a cell
// unavailable since start (cells.Cell.Err) starts once the cell is up, in the background (a
// failure then logged): one cell's outage keeps no other cell's jobs from running.
func (rs replicas) Start(ctx context.Context) error {
	for i, r := range rs {
		if r.waits() {
			go r.startWhenUp(ctx)
			continue
		}
		if err := r.Start(ctx); err != nil {
			_ = rs[:i].Stop(context.WithoutCancel(ctx))
			return err
		}
	}
	return nil
}

// waits says whether the replica's cell is not up yet.
func (r *replica) waits() bool {
	if r.cell == nil {
		return false
	}
	select {
	case <-r.cell.Up():
		return false
	default:
		return true
	}
}

func (r *replica) startWhenUp(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-r.cell.Up():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if err := r.Start(ctx); err != nil {
		r.log.Error("daemon: the replica of a cell that came up did not start", "cell", r.cell.Name, "err", err)
		return
	}
	r.log.Info("daemon: the replica of a cell that came up started", "cell", r.cell.Name, "replica", r.ID())
}

// Stop stops every replica (each finishing its batch in hand), all at once; one still waiting
// for its cell never starts.
func (rs replicas) Stop(ctx context.Context) error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			r.mu.Lock()
			r.stopped = true
			r.mu.Unlock()
			errs[i] = r.Daemon.Stop(ctx)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func newDaemonCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run a daemon replica (leader election, schedules, reclaimer, outbox relay) until SIGINT/SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var opt daemonOptions
			opt.Daemon.Name = flagOrEnv(cmd, "replica", "IDEMOPS_REPLICA")
			opt.Daemon.LeaseTTL, _ = f.GetDuration("lease-ttl")
			opt.Daemon.RenewEvery, _ = f.GetDuration("renew-every")
			opt.Daemon.ShutdownTimeout, _ = f.GetDuration("shutdown-timeout")
			reg := prometheus.NewRegistry()
			reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
			db, ds, err := daemonSetup(cmd, true, opt, reg)
			if err != nil {
				return err
			}
			defer db.Close()

			if addr, _ := f.GetString("metrics-addr"); addr != "" {
				stop, err := serveMetrics(addr, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			// The daemon outlives the signal context: the signal starts the graceful Stop.
			life, kill := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer kill()
			if err := ds.Start(life); err != nil {
				return err
			}
			if every, _ := f.GetDuration("audit-head-every"); every > 0 {
				secret, err := digestSecret(cmd, db)
				if err != nil {
					return err
				}
				chain, logger := audit.New(db.DB, secret), slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
				go logAuditHeads(life, chain, logger, every, reg)
			}
			for _, d := range ds {
				switch {
				case d.cell == nil:
					fmt.Fprintf(cmd.OutOrStdout(), "daemon replica %s running; jobs %s\n", d.ID(), strings.Join(sorted(d.Jobs()), ", "))
				case d.waits():
					fmt.Fprintf(cmd.OutOrStdout(), "cell %s: unavailable since start; daemon replica %s starts when it is up\n", d.cell.Name, d.ID())
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "cell %s: daemon replica %s running; jobs %s\n", d.cell.Name, d.ID(), strings.Join(sorted(d.Jobs()), ", "))
				}
			}
			<-cmd.Context().Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping: finishing the batches in hand")
			sctx, cancel := context.WithTimeout(context.Background(), opt.Daemon.ShutdownTimeout+10*time.Second)
			defer cancel()
			return ds.Stop(sctx)
		},
	}
	addDaemonFlags(cmd)
	addCellsFlag(cmd.Flags())
	f := cmd.Flags()
	f.String("replica", "", "replica name shown in the console (env IDEMOPS_REPLICA; default: the host name)")
	f.Duration("lease-ttl", 15*time.Second, "leader lease TTL")
	f.Duration("renew-every", 5*time.Second, "leader lease renewal interval (at most half the TTL)")
	f.Duration("shutdown-timeout", 30*time.Second, "how long a stop waits for the batch in hand")
	f.String("metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9464); empty: off")
	f.Duration("audit-head-every", time.Minute, "verify the audit log's new rows and log its head (audit head seq=N hash=H) this often; 0: off")
	return cmd
}

// logAuditHeads writes the audit log's head to the daemon's log every interval, so a checkpoint
// lives outside the database; each time it verifies only the rows after the head it logged last.
func logAuditHeads(ctx context.Context, log *audit.Log, logger *slog.Logger, every time.Duration, reg prometheus.Registerer) {
	g := newAuditGauges(reg, logger)
	t := time.NewTicker(every)
	defer t.Stop()
	var last *audit.Head
	for {
		last = logAuditHead(ctx, log, logger, last, g)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// logAuditHead seals the counted refusals of minutes that are over, verifies the rows after last (all rows when nil), logs the head as
// "audit head seq=N hash=H" (or the break it found), and returns the head to resume from.
func logAuditHead(ctx context.Context, log *audit.Log, logger *slog.Logger, last *audit.Head, g *auditGauges) *audit.Head {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// Counted refusals of minutes that are over join the chain before it is verified.
	if n, err := log.SealRefusals(ctx); err != nil {
		logger.Error("audit seal refusals", "err", err)
	} else if n > 0 {
		logger.Info("audit refusals sealed", "rows", n)
	}
	res, err := log.Verify(ctx, audit.VerifyOptions{From: last})
	switch {
	case err != nil:
		logger.Error("audit verify", "err", err)
		return last
	case !res.OK():
		logger.Error("audit chain broken", "seq", res.BadSeq, "reason", res.Reason, "last_head", last)
		g.broken.Set(1)
		return last
	}
	g.broken.Set(0)
	g.verified.SetToCurrentTime()
	logger.Info("audit head", "seq", res.Head.Seq, "hash", res.Head.Hash)
	return &res.Head
}

// auditGauges say what the last verification of the audit chain found, for the alerts
// IdemopsAuditChainNotVerified and IdemopsAuditChainBroken (deploy/prometheus/alerts.yml).
type auditGauges struct{ verified, broken prometheus.Gauge }

func newAuditGauges(reg prometheus.Registerer, logger *slog.Logger) *auditGauges {
	g := &auditGauges{
		verified: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idemops_audit_verified_timestamp_seconds",
			Help: "Unix time the audit log's chain was last verified intact up to its head (by this replica)."}),
		broken: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idemops_audit_chain_broken",
			Help: "1 when the last verification found the audit log's chain broken, 0 when it was intact."}),
	}
	if reg == nil {
		return g
	}
	for _, c := range []*prometheus.Gauge{&g.verified, &g.broken} {
		if err := reg.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				*c = are.ExistingCollector.(prometheus.Gauge)
				continue
			}
			logger.Error("audit metrics", "err", err)
		}
	}
	return g
}

// serveMetrics serves reg on addr until stop is called.
func serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := listen(addr, "metrics-addr")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 10 * time.Second}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List the daemon's schedules, or run one job now",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "Schedules with their next run and last run status, the leader and the replicas",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Each cell has its own leader, replicas and schedules.
			return onEveryCell(cmd, false, func(ctx context.Context, c cellDB, out io.Writer) error {
				return printJobs(ctx, out, c.DB)
			})
		},
	}
	addCellsFlag(list.Flags())
	var cell string
	run := &cobra.Command{
		Use:   "run NAME",
		Short: "Run one job (or schedule) now, in this process, and print its stats",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("jobs run takes one job or schedule name")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var opt daemonOptions
			opt.Daemon.Name = "cli"
			db, ds, err := daemonSetup(cmd, false, opt, prometheus.NewRegistry())
			if err != nil {
				return err
			}
			defer db.Close()
			targets, err := jobReplicas(cmd.Context(), db, ds, args[0], cell)
			if err != nil {
				return err
			}
			var failed []error
			unknown := 0
			for _, t := range targets {
				out := cmd.OutOrStdout()
				if t.Cell != "" {
					out = &prefixWriter{w: out, prefix: "cell " + t.Cell + ": "}
				}
				if known, err := runJobNow(cmd.Context(), out, t.D, args[0]); err != nil {
					if !known {
						unknown++
					}
					if t.Cell != "" {
						err = fmt.Errorf("cell %s: %w", t.Cell, err)
					}
					failed = append(failed, err)
				}
			}
			if unknown == len(targets) && len(targets) > 1 {
				return failed[0] // a name no cell knows: one refusal, not one per cell
			}
			return errors.Join(failed...)
		},
	}
	addDaemonFlags(run)
	addCellsFlag(run.Flags())
	run.Flags().StringVar(&cell, "cell", "", "with --cells: run it in this cell only (default: a recon job's schedule in the control cell, which sends the statement to its tenants' cells; any other job in every cell)")
	cmd.AddCommand(list, run)
	return cmd
}

// runJobNow runs the job or schedule name on d now and prints the run; an unknown name (known
// false) is a usage error listing d's jobs, a run that did not succeed an error naming it.
func runJobNow(ctx context.Context, out io.Writer, d *daemon.Daemon, name string) (known bool, err error) {
	r, err := d.RunJob(ctx, name)
	if err != nil {
		if errors.Is(err, daemon.ErrUnknownJob) {
			return false, usagef("jobs run %s: no such job or schedule (jobs: %s)", name, strings.Join(sorted(d.Jobs()), ", "))
		}
		return true, err
	}
	printRun(out, r)
	if r.Status != daemon.RunSucceeded {
		return true, fmt.Errorf("run %d of %s %s: %s", r.ID, r.Job, r.Status, r.Error)
	}
	return true, nil
}

func printJobs(ctx context.Context, out io.Writer, db *gorm.DB) error {
	leader, err := daemon.Leader(ctx, db)
	if err != nil {
		return err
	}
	switch {
	case leader == nil:
		fmt.Fprintln(out, "leader: none ever elected")
	case leader.Expired:
		fmt.Fprintf(out, "leader: none (lease of %s, term %d, expired %s)\n", leader.LeaderID, leader.Term, leader.ExpiresAt.Format(time.RFC3339))
	default:
		fmt.Fprintf(out, "leader: %s (term %d, since %s)\n", leader.LeaderID, leader.Term, leader.ElectedAt.Format(time.RFC3339))
	}
	replicas, err := daemon.Replicas(ctx, db)
	if err != nil {
		return err
	}
	for _, r := range replicas {
		fmt.Fprintf(out, "replica: %s on %s pid %d, last seen %s ago\n", r.ID, r.Host, r.PID, time.Since(r.LastSeen).Round(time.Second))
	}
	schedules, err := daemon.ListSchedules(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tJOB\tSPEC\tZONE\tNEXT RUN\tSTATE\tLAST RUN\tLAST STATUS")
	for _, s := range schedules {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		if s.RunRequestedAt != nil {
			state += ", run requested"
		}
		last, status := "never", "-"
		if s.LastRun != nil {
			last, status = s.LastRun.StartedAt.Format(time.RFC3339), string(s.LastRun.Status)
			if s.LastRun.Error != "" {
				status += ": " + s.LastRun.Error
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Job, s.Spec, s.TimeZone,
			s.NextRunAt.Format(time.RFC3339), state, last, status)
	}
	return tw.Flush()
}

func printRun(out io.Writer, r *daemon.Run) {
	fmt.Fprintf(out, "run %d of %s: %s in %s\n", r.ID, r.Job, r.Status, r.Duration().Round(time.Millisecond))
	keys := make([]string, 0, len(r.Stats))
	for k := range r.Stats {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  %-18s %d\n", k, r.Stats[k])
	}
	if r.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", r.Error)
	}
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// rekeyCredentials seals again, under the current deployment secret, the channel credentials a
// previous one sealed (--previous-digest-secret), so the previous secret can then go.
func rekeyCredentials(rec *reconcile.Reconciler, logger *slog.Logger) {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := rec.RekeyCredentials(ctx)
	switch {
	case err != nil:
		logger.Warn("reconcile: sealing credentials again under the current secret failed", "err", err)
	case n > 0:
		logger.Info("reconcile: credentials sealed again under the current secret", "count", n)
	}
}
