package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/mqlocal"
	"github.com/idemops/idemops/reconcile"
)

// demoReady is the one line `idemops demo` prints for scripts once everything is up.
type demoReady struct {
	ConsoleURL string `json:"console_url"`
	APIURL     string `json:"api_url"`
	GRPCAddr   string `json:"grpc_addr"`
	PaysimURL  string `json:"paysim_url"`
	// APIKey is the first tenant's key (APIKeys["acme"]), kept for scripts that read one.
	APIKey string `json:"api_key"`
	// APIKeys holds one bearer key per tenant (acme and globex), for the payments service over
	// HTTP and gRPC alike: two tenants to try the boundary between them.
	APIKeys          map[string]string `json:"api_keys"`
	OperatorUser     string            `json:"operator_user"`
	OperatorPassword string            `json:"operator_password"`
	// DatabaseURL is the connection string the CLI can use while the demo runs (with cells: the
	// control cell's).
	DatabaseURL string `json:"database_url"`
	// Cells (--cells 2) are the cells by name, and CellsFile the map naming them (for the CLI:
	// IDEMOPS_CELLS). Absent with one cell.
	Cells     map[string]demoReadyCell `json:"cells,omitempty"`
	CellsFile string                   `json:"cells_file,omitempty"`
}

// demoReadyCell is one cell in the READY line.
type demoReadyCell struct {
	DatabaseURL string   `json:"database_url"`
	Tenants     []string `json:"tenants"`
	Control     bool     `json:"control,omitempty"`
}

func newDemoCmd() *cobra.Command {
	var (
		consoleAddr, apiAddr, paysimAddr string
		traffic                          bool
		rate                             float64
		seed                             uint64
		cellCount                        = demoCellCount(1)
	)
	var grpcAddr string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole thing: private PostgreSQL, paysim, a payments service with traffic, the daemon and the console",
		Long: `demo starts everything on this machine: a private PostgreSQL (under --data-dir unless
DATABASE_URL is set), the schema, paysim (a payment-channel simulator), a sample payments
service that uses the claim logic, generated traffic (retries, duplicates, reused keys, crashes),
the daemon and the operator console. It prints each URL, a tenant API key and the operator
login, then a line "READY {json}" for scripts. Ctrl-C stops everything.

--cells 2 runs two tenant cells instead of one database: a private cluster each (acme in cell
a, the control cell, under pg/; globex in cell b under pg-b/), the map in cells.yaml, both
migrated, every request and row of a tenant in its own cell, a daemon leader per cell, and the
console listing both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if rate <= 0 || rate > 200 {
				return usagef("--rate must be in (0, 200]")
			}
			d, stopCells, err := openDemoDatabase(ctx, cmd, int(cellCount))
			if err != nil {
				return err
			}
			defer stopCells() // after d.Close: the pools go before their servers
			defer d.Close()
			secret, err := digestSecret(cmd, d)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			store, set, err := demoStores(ctx, d, claim.Config{DigestSecret: secret, Logger: log, Quarantine: 10 * time.Second})
			if err != nil {
				return err
			}
			amqpURL, stopBroker, err := demoBroker(ctx, cmd)
			if err != nil {
				return err
			}
			defer stopBroker()
			stateFile := dataPath(cmd, "paysim.json")
			if d.cluster == nil {
				stateFile = ""
			}
			wcfg := demo.WorldConfig{DB: d.DB, Store: store, PaysimAddr: paysimAddr, APIAddr: apiAddr, GRPCAddr: grpcAddr,
				Paysim: paysim.Config{Seed: int64(seed), DeclinePayees: []string{"declined-shop"}, StateFile: stateFile,
					DoubleChargeRate: 0.02, Logger: log,
					// The channel's callbacks misbehave the way real ones do (the order state machine's work).
					NotifyDuplicateRate: 0.1, NotifyReorderRate: 0.05, NotifyDelayRate: 0.05, LateCloseRate: 0.05},
				AMQPURL: amqpURL, Logger: log}
			if set != nil { // every tenant's requests and rows in its own cell
				wcfg.Stores, wcfg.Cells = set.StoreFor, set.Stores
			}
			world, err := demo.StartWorld(ctx, wcfg)
			if err != nil {
				var le *demo.ListenError
				if errors.As(err, &le) {
					return listenFailed(le.Err, le.Addr, map[string]string{demo.ServerPaysim: "paysim-addr",
						demo.ServerPayments: "api-addr", demo.ServerGRPC: "grpc-addr"}[le.Server])
				}
				return err
			}
			defer world.Close()

			parts, err := startDemoParts(ctx, cmd, d, store, secret, world, consoleAddr, log)
			if err != nil {
				return err
			}
			defer parts.stop()

			tenants := make([]string, 0, len(world.APIKeys))
			keys := make([]string, 0, len(world.APIKeys))
			byTenant := map[string]string{}
			for k, t := range world.APIKeys {
				keys = append(keys, k)
				tenants = append(tenants, t)
				byTenant[t] = k
			}
			sort.Strings(tenants)
			ready := demoReady{ConsoleURL: parts.consoleURL, APIURL: world.APIURL, GRPCAddr: world.GRPCAddr, PaysimURL: world.PaysimURL,
				APIKey: byTenant[tenants[0]], APIKeys: byTenant, OperatorUser: parts.operatorUser, OperatorPassword: parts.operatorPassword, DatabaseURL: d.URL}
			if set != nil {
				ready.Cells, ready.CellsFile = map[string]demoReadyCell{}, set.Map().File
				for _, c := range set.Map().Cells() {
					ready.Cells[c.Name] = demoReadyCell{DatabaseURL: c.URL, Tenants: c.Tenants, Control: c.Name == set.Map().Control()}
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "idemops demo is running.\n\n")
			fmt.Fprintf(out, "  console   %s   (sign in as %s / %s)\n", ready.ConsoleURL, ready.OperatorUser, ready.OperatorPassword)
			fmt.Fprintf(out, "  payments  %s   (HTTP)\n", ready.APIURL)
			fmt.Fprintf(out, "  gRPC      %s   (%s; proto/idemops/demo/v1/payments.proto or codec json; reflection, grpc.health.v1)\n", ready.GRPCAddr, demo.GRPCChargeMethod)
			for _, t := range tenants {
				fmt.Fprintf(out, "  tenant    %-8s Authorization: Bearer %s   (HTTP and gRPC)\n", t, byTenant[t])
			}
			fmt.Fprintf(out, "  paysim    %s\n", ready.PaysimURL)
			if set == nil {
				fmt.Fprintf(out, "  database  %s\n            (for the CLI while the demo runs: export DATABASE_URL='%s')\n", ready.DatabaseURL, ready.DatabaseURL)
			} else {
				printDemoCells(out, set.Map())
			}
			fmt.Fprintf(out, "\n  try: curl -i -X POST %s/v1/payments -H 'Authorization: Bearer %s' -H 'Idempotency-Key: my-key-1' \\\n", ready.APIURL, ready.APIKey)
			fmt.Fprintf(out, "         -d '{\"amount_minor\":1234,\"currency\":\"CNY\",\"merchant_order_no\":\"ord-1\",\"payee\":\"alice\"}'\n")
			fmt.Fprintf(out, "       (the same key with the other tenant's bearer is another key: tenants never see each other's)\n")
			if traffic {
				fmt.Fprintf(out, "\n  traffic: %.1f payments/s over %d tenants (retries, duplicates, reused keys, crashes)\n", rate, len(keys))
			}
			fmt.Fprintf(out, "  Ctrl-C stops everything.\n\n")
			line, _ := json.Marshal(ready)
			fmt.Fprintf(out, "READY %s\n", line)

			if traffic {
				stats := &demo.TrafficStats{}
				go demo.RunTraffic(ctx, demo.TrafficConfig{APIURL: world.APIURL, APIKeys: keys, PerSecond: rate, Seed: seed, Logger: log}, stats)
				go world.RunChannelTraffic(ctx, time.Duration(float64(4*time.Second)/rate), seed, log)
			}
			<-ctx.Done()
			fmt.Fprintln(cmd.ErrOrStderr(), "idemops demo: stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&consoleAddr, "console-addr", "127.0.0.1:8080", "console listen address (port 0: any free port)")
	f.StringVar(&apiAddr, "api-addr", "127.0.0.1:8081", "payments service listen address (port 0: any free port)")
	f.StringVar(&grpcAddr, "grpc-addr", "127.0.0.1:0", "payments service gRPC listen address (port 0: any free port)")
	f.StringVar(&paysimAddr, "paysim-addr", "127.0.0.1:8090", "paysim listen address (port 0: any free port)")
	f.BoolVar(&traffic, "traffic", true, "generate demo traffic")
	f.Float64Var(&rate, "rate", 2, "new payments per second when --traffic")
	f.String("amqp-url", "", "RabbitMQ URL for the payment events (env AMQP_URL); unset: a private broker for this run")
	f.Uint64Var(&seed, "seed", uint64(time.Now().UnixNano()), "seed for traffic and paysim faults")
	f.Var(&cellCount, "cells", "tenant cells to run: 1 (one database) or 2 (a private PostgreSQL cluster per cell, acme in a, globex in b)")
	addSSOFlags(f)
	return cmd
}

// demoBroker returns --amqp-url / AMQP_URL, or starts a private RabbitMQ for this run (stopped
// by stop) when neither is set.
func demoBroker(ctx context.Context, cmd *cobra.Command) (url string, stop func(), err error) {
	if url = flagOrEnv(cmd, "amqp-url", "AMQP_URL"); url != "" {
		return url, func() {}, nil
	}
	logPath := dataPath(cmd, "rabbitmq.log")
	_ = os.MkdirAll(filepath.Dir(logPath), 0o755)
	logf, _ := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	fmt.Fprintln(cmd.ErrOrStderr(), "idemops demo: starting a private RabbitMQ (AMQP_URL is unset)…")
	b, err := mqlocal.Start(ctx, mqlocal.Options{Log: logf})
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		return "", nil, fmt.Errorf("private RabbitMQ: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "idemops demo: RabbitMQ up in %.1fs on %s\n", b.StartupTime.Seconds(), b.URL())
	return b.URL(), func() {
		b.Stop()
		if logf != nil {
			logf.Close()
		}
	}, nil
}

// demoParts are the pieces of the demo beyond the world: the daemon and the console.
type demoParts struct {
	consoleURL, operatorUser, operatorPassword string
	stops                                      []func()
}

func (p *demoParts) stop() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
}

// startDemoParts starts the console (with a fresh demo admin login) and the daemon.
func startDemoParts(ctx context.Context, cmd *cobra.Command, d *database, store *claim.Store, secret []byte,
	world *demo.World, consoleAddr string, log *slog.Logger) (*demoParts, error) {
	p := &demoParts{operatorUser: "admin", operatorPassword: "demo-" + randomToken(9)}
	// The demo's recon jobs fetch from its own paysim, on loopback: the allow-list names it.
	rcfg, err := reconSources(cmd, secret, world.PaysimURL)
	if err != nil {
		return nil, err
	}
	cdb, err := d.ConsoleDB(ctx)
	if err != nil {
		return nil, err
	}
	ccfg := console.Config{DB: cdb, Claims: store, Operations: operationSet{world.Operations}.Get, Logger: log,
		KeyPanels: []console.KeyPanelFunc{world.Orders.KeyPanel}, Reconcile: rcfg}
	if err := ssoConfig(cmd, &ccfg); err != nil {
		return nil, err
	}
	closeCells, err := consoleCells(ctx, d, store.Config(), &ccfg) // with cells: key lists of every cell
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, closeCells)
	srv, err := console.New(ccfg)
	if err != nil {
		p.stop()
		return nil, err
	}
	p.stops = append(p.stops, srv.Close) // bulk replays stop between keys
	if err := srv.Registerer().Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idemops_key_answers_dropped_total",
		Help: "Client answers (replays, 409s, 422s) not recorded for the key page: buffer full or a failed batch."},
		func() float64 { return float64(world.AnswersDropped()) })); err != nil {
		p.stop()
		return nil, err
	}
	change := access.Change{Actor: "operator:demo"}
	_, err = srv.Operators().Add(ctx, change, access.NewOperator{Name: p.operatorUser, Password: p.operatorPassword,
		Role: access.RoleAdmin, Tenants: []string{access.AllTenants}})
	if errors.Is(err, access.ErrConflict) { // a previous demo run made it: give it this run's password
		err = srv.Operators().SetPassword(ctx, change, p.operatorUser, p.operatorPassword)
		if err == nil {
			err = srv.Operators().SetDisabled(ctx, change, p.operatorUser, false)
		}
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("demo operator: %w", err)
	}
	url, stop, err := listenAndServe(consoleAddr, "console-addr", srv.Handler())
	if err != nil {
		p.stop()
		return nil, err
	}
	p.consoleURL = url
	p.stops = append(p.stops, stop)
	deps := daemonDeps{DB: d.DB, Store: store, Operations: operationSet{world.Operations},
		Senders: world.Senders(), Replays: srv.Replays(), Registerer: srv.Registerer(), Logger: log, Recon: rcfg}
	dopt := daemonOptions{Daemon: daemon.Config{Name: "demo"}}
	var stopDaemon func()
	if d.cells == nil {
		stopDaemon, err = startDaemon(ctx, deps, dopt)
	} else { // a replica per cell, each the leader of its own cell's jobs
		stopDaemon, err = startCellDaemons(ctx, deps, d.cells, dopt)
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	p.stops = append(p.stops, stopDaemon)
	if err := demoReconJob(ctx, d, store, world, rcfg); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// demoReconJob schedules reconciliation of today's bills every minute, fees checked, so findings
// appear in the console while the demo runs: one job per channel kind, each fetching through
// the channel's own protocol from paysim (WeChat Pay APIv3, Alipay's gateway, Stripe's API,
// Adyen's report download), with credentials made for this run.
func demoReconJob(ctx context.Context, d *database, store *claim.Store, world *demo.World, rcfg reconcile.Config) error {
	rcfg.Store, rcfg.Operations = store, operationSet{world.Operations}
	rec, err := reconcile.New(d.DB, rcfg)
	if err != nil {
		return err
	}
	// paysim's fee: 60 bp of a charge, half up to the minor unit, none returned on a refund.
	fees := &reconcile.FeeSchedule{RateBP: "60", Refunds: "kept"}
	specs, err := demo.SetUpReconChannels(ctx, d.DB, rec, world.Paysim, world.PaysimURL, []string{demo.OperationCharge}, fees)
	if err != nil {
		return err
	}
	for _, spec := range specs {
		_, err := rec.UpdateJob(ctx, spec.Name, spec)
		if errors.Is(err, reconcile.ErrNotFound) {
			_, err = rec.CreateJob(ctx, spec)
		}
		if err != nil {
			return fmt.Errorf("recon job %s: %w", spec.Name, err)
		}
	}
	return nil
}

// startDaemon builds and starts a replica in this process; stop finishes its batch in hand.
func startDaemon(ctx context.Context, deps daemonDeps, opt daemonOptions) (stop func(), err error) {
	dm, err := newDaemon(deps, opt)
	if err != nil {
		return nil, err
	}
	return startBuilt(ctx, dm, deps)
}

// startBuilt is startDaemon's start of dm, built on deps.
func startBuilt(ctx context.Context, dm *daemon.Daemon, deps daemonDeps) (stop func(), err error) {
	// The replica outlives the signal context: the signal starts the graceful Stop.
	life, kill := context.WithCancel(context.WithoutCancel(ctx))
	if err := dm.Start(life); err != nil {
		kill()
		return nil, err
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	go logAuditHeads(life, audit.New(deps.DB, deps.Store.Config().DigestSecret), logger, time.Minute, deps.Registerer)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = dm.Stop(sctx)
		kill()
	}, nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
