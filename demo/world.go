package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/claim/grpcidem"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/downstream/paysim"
)

// WorldConfig says where the demo world listens.
type WorldConfig struct {
	DB    *gorm.DB
	Store *claim.Store
	// PaysimAddr, APIAddr and GRPCAddr are loopback addresses; port 0 (or empty) picks a free one.
	PaysimAddr, APIAddr, GRPCAddr string
	// Paysim configures the simulator (faults, seed).
	Paysim paysim.Config
	// Tenants get one API key each (default: acme, globex).
	Tenants []string
	// AMQPURL, when set, is the broker that carries the payments service's domain events
	// (payment.succeeded, through the outbox) to the fulfillment consumer, which StartWorld
	// starts. Unset: no events are staged.
	AMQPURL string
	// Events overrides PaymentEvents (tests use names of their own on a shared broker).
	Events *consume.Topology
	Logger *slog.Logger
	// PaysimURL, when set, is a paysim running elsewhere (another process): none is started,
	// and its notify URL is that process's business. Paysim.NotifySecret must be its secret.
	PaysimURL string
	// APIKeys, when set, are the bearer keys (key → tenant) instead of fresh ones per tenant,
	// so that replicas of the service in other processes accept the same keys.
	APIKeys map[string]string
	// TracerProvider traces the payments service's HTTP and gRPC calls (otelhttp, otelgrpc);
	// nil: OpenTelemetry's global provider, a no-op unless telemetry.Setup installed one.
	TracerProvider trace.TracerProvider
	// LedgerURL, when set, is an external ledger with no idempotency: every completed payment
	// also stages a ledger.post outbox row, which the daemon's relay delivers there.
	LedgerURL string
	// Stores, when set, routes every request to its tenant's claim store (a deployment of
	// cells: cells.Set.StoreFor), and with it everything the tenant owns: keys, payments,
	// orders, balances, checkout tokens, likes, the answers recorded for its keys and the
	// consumers' rows — all in the tenant's cell. A tenant with no store is refused (503), its
	// events handed back. DB and Store remain the default cell's: retention policies, and the
	// orders the channel's callbacks look in first.
	Stores func(tenant string) (*claim.Store, error)
	// Cells, with Stores, are every cell's store by name (cells.Set.Stores): the gRPC server's
	// health reports each cell ("cell/NAME") and stays SERVING while any cell answers.
	Cells func() map[string]*claim.Store
	// NoServe builds the operations and outbox senders only — no HTTP or gRPC server, no
	// consumers — for a daemon or console in a process of its own (the chaos run).
	NoServe bool
}

// World is a running paysim and payments service.
type World struct {
	Paysim    *paysim.Server
	PaysimURL string
	APIURL    string
	// GRPCAddr is the payments service over gRPC (host:port, plaintext, codec "json").
	GRPCAddr string
	// APIKeys maps each bearer key to its tenant.
	APIKeys map[string]string
	// Operations holds payment.charge (with the demo's Apply) and receipt.notify.
	Operations *downstream.Registry
	Charge     *downstream.PaysimCharge
	Client     *paysim.Client
	// Orders is the order state machine the channel's callbacks drive.
	Orders *Orders
	// Answers records the replays, 409s and 422s the payments service answers (HTTP and gRPC),
	// in batches, for the console's key page; Close flushes it. With Stores it records the
	// default cell's keys, and each other cell has a recorder of its own (AnswersDropped).
	Answers *claim.AnswerRecorder
	// Fulfillment and Shipping consume the payment events (nil without a broker).
	Fulfillment, Shipping *consume.Consumer
	servers               []*http.Server
	grpcServer            *grpc.Server
	stopHealth            func()
	events                *daemon.AMQPSender
	cells                 *worldCells
	ledger                *LedgerSender
	stopEvents            func()
}

// StartWorld starts paysim and the payments service on loopback.
func StartWorld(ctx context.Context, cfg WorldConfig) (*World, error) {
	if len(cfg.Tenants) == 0 {
		cfg.Tenants = []string{"acme", "globex"}
	}
	if len(cfg.Paysim.NotifySecret) == 0 {
		cfg.Paysim.NotifySecret = []byte(randomHex(16))
	}
	w := &World{APIKeys: map[string]string{}, cells: &worldCells{stores: cfg.Stores, db: cfg.DB, logger: cfg.Logger}}
	var sim *paysim.Server
	if cfg.PaysimURL != "" {
		w.PaysimURL = cfg.PaysimURL
	} else {
		var err error
		if sim, err = paysim.NewServer(cfg.Paysim); err != nil {
			return nil, err
		}
		w.Paysim = sim
		if w.PaysimURL, err = w.serve(ServerPaysim, cfg.PaysimAddr, sim); err != nil {
			return nil, err
		}
	}
	var err error
	w.Client = paysim.NewClient(w.PaysimURL, &http.Client{Timeout: 10 * time.Second})
	w.Charge = downstream.NewPaysimCharge(w.Client)
	w.Charge.ApplyFunc = applyPaymentAndOpenOrder
	w.Charge.DeclinedSnapshot = DeclinedPayment
	w.Charge.Routes = ChannelRoutes
	w.Operations = downstream.NewRegistry()
	if err := w.Operations.Register(w.Charge); err != nil {
		return nil, err
	}
	for _, t := range cfg.Tenants {
		w.APIKeys["sk_demo_"+t+"_"+randomHex(12)] = t
	}
	if cfg.APIKeys != nil {
		w.APIKeys = cfg.APIKeys
	}
	if cfg.AMQPURL != "" {
		if err := w.startEvents(cfg.DB, cfg.Store, cfg.Stores, cfg.AMQPURL, cfg.Events, cfg.Logger, !cfg.NoServe); err != nil {
			w.Close()
			return nil, err
		}
		w.Charge.ApplyFunc = func(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
			snap, err := ApplyPaymentWithEvent(ctx, tx, l, doc)
			if err != nil {
				return nil, err
			}
			return snap, OpenOrder(ctx, tx, l, snap.ResourceID)
		}
	}
	if cfg.LedgerURL != "" {
		w.ledger = &LedgerSender{URL: cfg.LedgerURL}
		inner := w.Charge.ApplyFunc
		w.Charge.ApplyFunc = func(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
			snap, err := inner(ctx, tx, l, doc)
			if err != nil {
				return nil, err
			}
			return snap, EnqueueLedgerPost(ctx, tx, l, snap.ResourceID)
		}
	}
	if cfg.NoServe {
		return w, nil
	}
	svc := NewService(cfg.DB, cfg.Store, w.Charge, w.APIKeys)
	svc.tracing = cfg.TracerProvider
	if svc.tracing == nil {
		svc.tracing = otel.GetTracerProvider()
	}
	svc.channel = w.Client
	w.Answers = claim.NewAnswerRecorder(cfg.DB, claim.AnswerRecorderConfig{Logger: cfg.Logger})
	w.Answers.Start()
	svc.answers = w.Answers
	w.cells.answers = map[*claim.Store]*claim.AnswerRecorder{cfg.Store: w.Answers}
	if cfg.Stores != nil {
		svc.RouteByTenant(cfg.Stores, w.cells.answersOf)
	}
	w.Orders = &Orders{DB: cfg.DB}
	mux := http.NewServeMux()
	// A callback names its order by number alone: the other cells' orders are looked in too.
	callbacks := &CallbackHandler{Orders: w.Orders, Secret: cfg.Paysim.NotifySecret}
	if cfg.Stores != nil {
		callbacks.Elsewhere = func() []*Orders { return w.cells.otherOrders(w.tenants()) }
	}
	mux.Handle(CallbackPath, callbacks)
	for _, db := range w.cells.dbs(cfg.Tenants) {
		if err := LikeKey.Validate(ctx, db); err != nil {
			w.Close()
			return nil, err
		}
	}
	mux.Handle("/v1/articles/", (&Likes{DB: cfg.DB, Svc: svc}).Handler())
	checkout := svc.CheckoutHandler()
	mux.Handle("/v1/checkout", checkout)
	mux.Handle("/v1/checkout/", checkout)
	mux.Handle("/", svc.Handler())
	traced := otelhttp.NewHandler(mux, "payments", otelhttp.WithTracerProvider(svc.tracing),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + routeOf(r.URL.Path) }))
	if w.APIURL, err = w.serve(ServerPayments, cfg.APIAddr, traced); err != nil {
		w.Close()
		return nil, err
	}
	if sim != nil {
		sim.SetNotifyURL(w.APIURL + CallbackPath)
	}
	if w.GRPCAddr, err = w.serveGRPC(cfg.GRPCAddr, svc, cfg.Cells); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *World) serveGRPC(addr string, svc *Service, cells func() map[string]*claim.Store) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	srv, err := svc.GRPCServer()
	if err != nil {
		return "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", &ListenError{Server: ServerGRPC, Addr: addr, Err: err}
	}
	w.grpcServer = srv
	// Reflection and grpc.health.v1, health following the store (each cell's, with cells):
	// grpcurl and load balancers.
	w.stopHealth = grpcidem.ServeOperations(srv, svc.store, grpcidem.HealthConfig{Cells: cells})
	go func() { _ = srv.Serve(l) }() // returns when Close stops the server
	return l.Addr().String(), nil
}

// The world's servers, as a ListenError names them.
const (
	ServerPaysim   = "paysim"
	ServerPayments = "payments"
	ServerGRPC     = "payments gRPC"
)

// ListenError is a server of the world that could not listen on its address (a port in use),
// so that the command which chose the address can say which of its flags moves it.
type ListenError struct {
	Server, Addr string
	Err          error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("%s: listen %s: %v", e.Server, e.Addr, e.Err)
}
func (e *ListenError) Unwrap() error { return e.Err }

func (w *World) serve(server, addr string, h http.Handler) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", &ListenError{Server: server, Addr: addr, Err: err}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	w.servers = append(w.servers, srv)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener was closed under it; Close reports nothing more useful
		}
	}()
	return "http://" + l.Addr().String(), nil
}

// APIKey returns one tenant's key (for people and scripts).
func (w *World) APIKey(tenant string) string {
	for k, t := range w.APIKeys {
		if t == tenant {
			return k
		}
	}
	return ""
}

// Close stops the servers (gracefully, within 5 s) and saves paysim's state.
func (w *World) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range w.servers {
		_ = s.Shutdown(ctx)
	}
	if w.stopHealth != nil {
		w.stopHealth() // NOT_SERVING first: balancers drain while the calls in hand finish
	}
	if w.grpcServer != nil {
		stopped := make(chan struct{})
		go func() { w.grpcServer.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			w.grpcServer.Stop()
		}
	}
	if w.cells.answers != nil {
		w.cells.stopAnswers() // after the servers: their last answers are held, and written now
	}
	if w.Paysim != nil {
		_ = w.Paysim.Close()
	}
	if w.stopEvents != nil {
		w.stopEvents()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Ops is the world's operations registry as the daemon's reclaimer and the reconciler look an
// operation up: by name, found or not.
type Ops struct{ W *World }

// Get is the operation called name, if the world registered it.
func (o Ops) Get(name string) (claim.Operation, bool) {
	op, err := o.W.Operations.Get(name)
	return op, err == nil
}

// routeOf is a request path's route for a span name: its first two segments (/v1/payments,
// /v1/articles), never an id or a key.
func routeOf(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return "/" + strings.Join(parts, "/")
}
