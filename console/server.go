package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/retention"
)

//go:embed static
var staticFiles embed.FS

// Config sets up a Server. Zero fields take the defaults in withDefaults.
type Config struct {
	// DB is the database holding the claim and console tables, opened by tenantdb.Open: every
	// request runs its statements under the signed-in operator's tenants, so row-level security
	// (migration 00118) hides other tenants' rows even where a Go check would miss them. Its
	// login must be a member of migrations.TenantRole (migrations.EnsureTenantRole).
	DB *gorm.DB
	// Claims is the claim store keys are read and recorded through; when nil one is made on DB
	// with DigestSecret. A store on another handle (the services') lends its configuration to
	// one made on DB: the console reads and records keys through DB alone.
	Claims *claim.Store
	// DigestSecret keys key digests (exact-key search); taken from Claims when that is set.
	DigestSecret []byte
	// Operations finds the Operation of a key for "check downstream"; nil disables the check.
	Operations func(name string) (claim.Operation, bool)
	// IdleTimeout ends a session unused this long (default 30 min); AbsoluteTimeout ends any
	// session this long after sign-in (default 12 h).
	IdleTimeout, AbsoluteTimeout time.Duration
	// SecureCookies marks cookies Secure even when the request did not arrive over TLS (set it
	// behind a TLS-terminating proxy). Requests over TLS always get Secure cookies.
	SecureCookies bool
	// Throttle bounds failed sign-ins.
	Throttle access.ThrottleConfig
	// Argon2 is the cost of new password hashes (default DefaultArgon2).
	Argon2 access.Argon2Params
	// QueryTimeout bounds each page's database work (default 5 s); LookupTimeout bounds a
	// downstream check (default 10 s).
	QueryTimeout, LookupTimeout time.Duration
	// ApprovalAbove, BulkCap and BulkPreviewTimeout tune the replay workflow (replay.Config has
	// their defaults and limits): the four-eyes threshold in minor units (default 100000; -1:
	// never), the most keys one bulk replay takes (default 500, at most 5000), and the bound on a
	// bulk preview's downstream lookups (default 20 s).
	ApprovalAbove      int64
	BulkCap            int
	BulkPreviewTimeout time.Duration
	// ReplayAnswerWait is how long a replay's confirm waits for its outcome before showing the
	// request's page, which follows the replay live from there (default 5 s).
	ReplayAnswerWait time.Duration
	// UploadLimit bounds a statement upload (default 256 MiB).
	UploadLimit int64
	// FindingsExportCap bounds one findings export (default FindingsExportCap rows): above it
	// the export is refused, naming the cap.
	FindingsExportCap int64
	// PreviewTimeout bounds a retention dry run started from the console (default 60 s).
	PreviewTimeout time.Duration
	// Reconcile tunes the reconciler behind the reconciliation pages; its Store, Operations and
	// Auditor are always the console's own (Claims, Operations, the audit log).
	Reconcile reconcile.Config
	// Cells, when set, places tenants' keys in several databases (cells.go): DB is then the
	// control database (operators, sessions, audit, jobs, reconciliation configuration), key
	// lists fan out to the cells of the operator's tenants and a key's actions go to its own
	// cell. Nil: one database, DB.
	Cells Cells
	// KeyPanels add sections to the key page (see KeyPanelFunc).
	KeyPanels []KeyPanelFunc
	// SSO turns on OpenID Connect sign-in (nil: off); see SSOConfig.
	SSO *SSOConfig
	// DisableLocalLogin refuses password sign-in (the form is not shown); it needs SSO.
	DisableLocalLogin bool
	// TracerProvider traces each request as a span (default: OpenTelemetry's global provider,
	// a no-op unless telemetry.Setup installed one).
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.DB == nil {
		return c, errors.New("console: Config.DB is required")
	}
	if !tenantdb.Scoped(c.DB) {
		return c, errors.New("console: Config.DB must be opened by tenantdb.Open (row-level security by the operator's tenants)")
	}
	if c.Claims != nil && c.Claims.DB() != c.DB {
		st, err := claim.NewStore(c.DB, c.Claims.Config())
		if err != nil {
			return c, fmt.Errorf("console: %w", err)
		}
		c.Claims = st
	}
	if c.Claims == nil {
		st, err := claim.NewStore(c.DB, claim.Config{DigestSecret: c.DigestSecret, Logger: c.Logger})
		if err != nil {
			return c, fmt.Errorf("console: %w", err)
		}
		c.Claims = st
	}
	c.DigestSecret = c.Claims.Config().DigestSecret
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.AbsoluteTimeout == 0 {
		c.AbsoluteTimeout = 12 * time.Hour
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 5 * time.Second
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = 10 * time.Second
	}
	if c.UploadLimit == 0 {
		c.UploadLimit = 256 << 20
	}
	if c.FindingsExportCap <= 0 {
		c.FindingsExportCap = FindingsExportCap
	}
	if c.PreviewTimeout == 0 {
		c.PreviewTimeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.UploadLimit < 0 {
		return c, errors.New("console: UploadLimit must be positive")
	}
	c.Throttle = c.Throttle.WithDefaults()
	if c.SSO != nil {
		sc := *c.SSO
		if err := sc.validate(); err != nil {
			return c, err
		}
		c.SSO = &sc
	} else if c.DisableLocalLogin {
		return c, errors.New("console: DisableLocalLogin needs SSO: nobody could sign in")
	}
	if c.IdleTimeout > c.AbsoluteTimeout {
		return c, errors.New("console: IdleTimeout must not exceed AbsoluteTimeout")
	}
	return c, nil
}

// Server is the console. Mount Handler() anywhere (idemops console, serve, demo).
type Server struct {
	cfg      Config
	tracer   trace.Tracer
	db       *gorm.DB
	claims   *claim.Store
	ops      *access.Operators
	audit    *audit.Log
	sessions *access.Sessions
	throttle *access.Throttle
	scope    *access.Scope
	metrics  *metrics
	engine   *gin.Engine
	recon    *reconcile.Reconciler
	purge    *retention.PurgeJob
	sso      *sso // nil when single sign-on is off
	replays  *replay.Workflow
	cells    *cellSet   // where keys live: one cell, DB, without Config.Cells
	live     *liveShare // the views of live regions, shared by the pages polling them
	// goScopeOff drops the Go scope of key reads (keyScope): set by one test only, which shows
	// that row-level security still hides other tenants' keys without it.
	goScopeOff bool
	// smallCap, when not 0, is the dashboard's cap instead of dashboardCap: set by one test
	// only, which shows the cap with a few keys.
	smallCap int
}

// New validates cfg and builds the server and its routes.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := audit.New(cfg.DB, cfg.DigestSecret)
	ops := access.NewOperators(cfg.DB, cfg.Argon2, log)
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	s := &Server{
		live:     newLiveShare(liveTTL),
		cfg:      cfg,
		tracer:   tp.Tracer("github.com/idemops/idemops/console"),
		db:       cfg.DB,
		claims:   cfg.Claims,
		ops:      ops,
		audit:    log,
		sessions: access.NewSessions(cfg.DB, ops, cfg.IdleTimeout, cfg.AbsoluteTimeout),
		throttle: access.NewThrottle(cfg.DB, cfg.Throttle),
		scope:    access.NewScope(cfg.DB),
		metrics:  newMetrics(),
	}
	if cfg.SSO != nil {
		s.sso = &sso{cfg: *cfg.SSO}
	}
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idemops_audit_head_seq",
		Help: "Sequence of the audit log's newest row: a checkpoint kept outside the database (a drop means rows were deleted)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			h, err := s.audit.Head(ctx)
			if err != nil {
				return -1
			}
			return float64(h.Seq)
		}))
	rc := cfg.Reconcile
	rc.Store, rc.Auditor, rc.Operations = cfg.Claims, reconcile.LogAuditor{Log: s.audit, DB: cfg.DB}, nil
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	if rc.Keyring == nil && len(cfg.DigestSecret) >= 16 {
		// Channel credentials are sealed under a key derived from the deployment secret.
		if rc.Keyring, err = reconcile.NewKeyring(cfg.DigestSecret); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	if cfg.Operations != nil {
		rc.Operations = operationsFunc(cfg.Operations)
	}
	if s.recon, err = reconcile.New(cfg.DB, rc); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if s.purge, err = retention.NewPurgeJob(cfg.DB, retention.Config{CountTimeout: cfg.PreviewTimeout, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if s.replays, err = replay.New(replay.Config{DB: cfg.DB, Claims: cfg.Claims, Operations: cfg.Operations,
		Audit: s.audit, ApprovalAbove: cfg.ApprovalAbove, BulkCap: cfg.BulkCap,
		QueryTimeout: cfg.QueryTimeout, LookupTimeout: cfg.LookupTimeout, BulkPreviewTimeout: cfg.BulkPreviewTimeout,
		AnswerWait: cfg.ReplayAnswerWait, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	s.cfg.BulkCap, s.cfg.BulkPreviewTimeout = s.replays.Config().BulkCap, s.replays.Config().BulkPreviewTimeout
	if s.cells, err = s.newCellSet(cfg); err != nil {
		s.replays.Close()
		return nil, err
	}
	s.metrics.reg.MustRegister(s.replays.Collectors()...)
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	// The client address is the connection's peer; X-Forwarded-For is not trusted by default.
	if err := e.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	e.Use(s.recoverPanics, s.traceRequests, s.securityHeaders, s.countRequests, s.crossOrigin(http.NewCrossOriginProtection()), s.limitBody, s.language)
	for _, rt := range s.routes() {
		// A route that names an object must say which kind it is, so enforce can check its scope.
		if _, _, _, err := routeObject(rt.Path); err != nil {
			s.Close()
			return nil, fmt.Errorf("console: %w", err)
		}
		e.Handle(rt.Method, rt.Path, s.enforce(rt))
	}
	e.NoRoute(func(c *gin.Context) { s.fail(c, nil, kindPage, ErrNotFound) })
	s.engine = e
	return s, nil
}

// Close stops background work (single replays holding a key through its quarantine) and waits
// for it. Bulk replays are the daemon's jobs.
func (s *Server) Close() {
	s.cells.close()
	s.replays.Close()
}

// Replays is the replay workflow behind the replay pages; a daemon in the same process runs its
// bulk job (replay.NewBulkJob) on it.
func (s *Server) Replays() *replay.Workflow { return s.replays }

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Operators is the operator directory (the CLI's user commands use it too).
func (s *Server) Operators() *access.Operators { return s.ops }

// staticFS is the embedded static folder.
func staticFS() http.FileSystem {
	sub, _ := fs.Sub(staticFiles, "static")
	return http.FS(sub)
}

func (s *Server) ctx(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout)
}

// maxBody bounds every request body; forms here are small.
const maxBody = 64 << 10

// uploadRoutes take a statement upload: their bodies are bounded by Config.UploadLimit instead.
var uploadRoutes = map[string]bool{"/reconcile/upload": true, "/api/v1/reconcile/statements": true}

func (s *Server) limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		limit := int64(maxBody)
		if uploadRoutes[c.FullPath()] {
			// The multipart envelope (form fields, boundaries) gets a little room above the file.
			limit = s.cfg.UploadLimit + maxBody
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	}
	c.Next()
}

// csp allows only same-origin scripts and styles: no inline script, no inline style.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func (s *Server) securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if c.Request.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	c.Next()
}

// crossOrigin refuses a state-changing request a browser marks as cross-site (Sec-Fetch-Site,
// or an Origin that is not the request's host) with 403, before any handler runs. It is a second,
// standard layer beside the session's CSRF token; clients that are not browsers send neither
// header and pass, so the API's bearer tokens are unaffected.
func (s *Server) crossOrigin(cop *http.CrossOriginProtection) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := cop.Check(c.Request); err != nil {
			kind := kindPage
			if strings.HasPrefix(c.Request.URL.Path, "/api/") {
				kind = kindAPI
			}
			s.fail(c, nil, kind, fmt.Errorf("%w (%v)", access.ErrCSRF, err))
			c.Abort()
			return
		}
		c.Next()
	}
}

func (s *Server) recoverPanics(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.fail(c, nil, kindPage, fmt.Errorf("panic: %v", p))
			c.Abort()
		}
	}()
	c.Next()
}
