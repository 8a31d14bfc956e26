// Package httpidem puts the Idempotency-Key contract on gin routes, on top of the claim package
// (semantics of the IETF httpapi draft "The Idempotency-Key HTTP Header Field", plus Stripe's
// replay marker):
//
//   - missing key where the route requires one → 400; malformed key → 400;
//   - same key still in progress → 409 with Retry-After;
//   - same key reused with a different payload → 422;
//   - completed (or finally failed) → the stored status, headers and body, with
//     Idempotent-Replayed: true;
//   - a key whose stored response has expired → 410 with the resource id (never a re-execution).
//
// Errors are application/problem+json with a distinct type per case. The tenant always comes from
// the service's own authentication (Config.Tenant), never from a header or body field.
//
// Two ways to use it: Handler runs a claim.Operation through claim.Store.Run (the operation
// executes downstream and its Apply writes the business rows in the transaction that completes the
// key); Middleware wraps an ordinary handler, runs its database work in the transaction that
// records the key, and captures its response into the snapshot.
//
// The core is plain net/http (Wrap, OperationHandler: core.go); the gin functions here are thin
// adapters over it.
package httpidem

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks a response replayed from a stored snapshot.
const HeaderReplayed = "Idempotent-Replayed"

// TenantFunc returns the authenticated caller of the request, from the service's own
// authentication. An error answers 401.
type TenantFunc func(c *gin.Context) (string, error)

// Config is shared by every route of a service.
type Config struct {
	// Store is the claim store every request uses, unless Stores is set.
	Store *claim.Store
	// Stores, when set, picks the store by the authenticated tenant (a deployment of several
	// cells, package cells): a request is claimed in its tenant's cell only. A tenant it finds no
	// store for (an error, e.g. cells.ErrNoCell) is refused — 503 tenant-unavailable, a log line,
	// Unrouted counted — and never sent to Store. Store still describes the key policy
	// (PolicyHandler): every cell's store has one claim.Config.
	Stores func(tenant string) (*claim.Store, error)
	// AnswersOf, with Stores, is the answer recorder of a tenant's store (each cell records its
	// own keys' answers); nil records none. Answers is not used with Stores.
	AnswersOf func(*claim.Store) *claim.AnswerRecorder
	// Unrouted counts the requests refused because Stores found no store for their tenant.
	Unrouted claim.Counter
	// Tenant authenticates a gin request; TenantFromRequest a net/http one (Wrap,
	// OperationHandler). The gin adapters use TenantFromRequest when Tenant is nil.
	Tenant            TenantFunc
	TenantFromRequest func(*http.Request) (string, error)
	// Service names the caller in key events (actor service:NAME).
	Service string
	// MaxBodyBytes bounds request bodies (default 1 MiB).
	MaxBodyBytes int64
	// ProblemBase prefixes problem types (default "/problems/"); the service may serve docs there.
	ProblemBase string
	// StatusPath is where the service mounts StatusHandler (default /idempotency/status): the
	// 409 in-progress answer points there. PolicyPath is where it mounts PolicyHandler (default
	// /idempotency/policy): the key problems point there.
	StatusPath, PolicyPath string
	// Retention reports the live retention policies for the published key policy (nil: the
	// store's default periods).
	Retention RetentionFunc
	// Answers, when set, records the replays, 409s and 422s each key's client gets, off the
	// answering path (buffered, written in batches), for the console's key page.
	Answers *claim.AnswerRecorder
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ProblemBase == "" {
		c.ProblemBase = "/problems/"
	}
	if c.StatusPath == "" {
		c.StatusPath = "/idempotency/status"
	}
	if c.PolicyPath == "" {
		c.PolicyPath = "/idempotency/policy"
	}
	if c.Service == "" {
		c.Service = "api"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Route declares the contract of one endpoint.
type Route struct {
	// Operation names the business action (the key's scope), e.g. "payment.charge".
	Operation string
	// KeyOptional lets requests without a key through without idempotency (default: required).
	KeyOptional bool
	// Intent says which body fields carry intent, or the natural-key fields (then no client key
	// is used).
	Intent claim.IntentSpec
	// External declares that the handler acts outside this database (calls a channel, sends a
	// message) and has no downstream lookup. Then a 5xx is stored and replayed and the key is
	// held for an operator, instead of being retried; see serveMiddleware. Default false: all
	// the handler's effects are database writes in TxFrom, rolled back on a 5xx.
	External bool
}

// Handler answers a route by running op through the claim logic. Validators run on the body
// before the claim: a refusal answers 400 invalid-field and stores nothing under the key.
func Handler(cfg Config, op claim.Operation, validators ...Validator) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		serveOperation(c.Writer, c.Request, cfg, ginTenant(cfg, c), op, validators)
		c.Abort()
	}
}

// Local is LocalHandler for gin: the one-commit path for a route whose effects are all local.
func Local(cfg Config, route Route, fn claim.LocalFunc, validators ...Validator) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		serveLocal(c.Writer, c.Request, cfg, ginTenant(cfg, c), route, fn, validators)
		c.Abort()
	}
}

// Middleware wraps an ordinary gin handler (the gin adapter of Wrap). On a fresh claim the
// handler runs with the lease and the route's transaction in the request context (Tx, Lease,
// Complete); unless it completed or released the key itself, its response becomes the key's
// record: below 400 completes the key, 4xx fails it finally (replayed, as Stripe does) — both
// committed with the handler's writes in Tx — and 5xx rolls Tx back (see Route.External).
func Middleware(cfg Config, route Route) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		orig := c.Writer
		defer func() { c.Writer = orig }() // also when the handler panics, for gin's recovery
		called := false
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			c.Request = r
			if b, ok := w.(*buffer); ok {
				c.Writer = &ginWriter{buffer: b}
			}
			c.Next()
		})
		serveMiddleware(orig, c.Request, cfg, ginTenant(cfg, c), route, next)
		if !called {
			c.Abort()
		}
	}
}

func ginTenant(cfg Config, c *gin.Context) tenantFunc {
	if cfg.Tenant == nil {
		return cfg.requestTenant()
	}
	return func(*http.Request) (string, error) { return cfg.Tenant(c) }
}

// Lease returns the lease a Middleware-wrapped handler holds (nil outside one).
func Lease(c *gin.Context) *claim.Lease { return LeaseFrom(c.Request.Context()) }

// Tx returns the transaction a Middleware-wrapped handler does its database work in (nil
// outside one); see TxFrom.
func Tx(c *gin.Context) *gorm.DB { return TxFrom(c.Request.Context()) }

// Complete completes the key inside tx (Tx(c), or the handler's own transaction) so the
// business rows and the key commit together; the handler then writes the same response itself.
func Complete(c *gin.Context, store *claim.Store, tx *gorm.DB, snap *claim.Snapshot) error {
	return CompleteContext(c.Request.Context(), tx, snap)
}

// Release gives the key up after a failure before any externally visible change (the request
// may be retried as new).
func Release(c *gin.Context, store *claim.Store, reason string) error {
	return ReleaseContext(c.Request.Context(), reason)
}

// parseKeyHeader accepts the draft's structured-header string ("abc") and a bare token (abc, as
// Stripe clients send it). Validation of length and characters is the claim package's.
func parseKeyHeader(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errors.New("send exactly one Idempotency-Key header")
	}
	v := strings.TrimSpace(values[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		inner := v[1 : len(v)-1]
		var b strings.Builder
		for i := 0; i < len(inner); i++ {
			ch := inner[i]
			if ch == '\\' {
				if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", errors.New("invalid escape in quoted Idempotency-Key")
				}
				i++
				ch = inner[i]
			} else if ch == '"' {
				return "", errors.New("unescaped quote in Idempotency-Key")
			}
			b.WriteByte(ch)
		}
		v = b.String()
		if v == "" {
			return "", errors.New("Idempotency-Key must not be empty")
		}
	} else if v == "" && len(values[0]) > 0 {
		return "", errors.New("Idempotency-Key must not be blank")
	}
	if err := claim.ValidateKey(v); err != nil && v != "" {
		return "", err
	}
	return v, nil
}

// ginWriter lets a gin handler write into the Middleware's buffer.
type ginWriter struct{ *buffer }

var _ gin.ResponseWriter = (*ginWriter)(nil)

func (g *ginWriter) WriteString(s string) (int, error) { return g.Write([]byte(s)) }
func (g *ginWriter) Status() int                       { return g.status() }
func (g *ginWriter) Written() bool                     { return g.wrote }
func (g *ginWriter) WriteHeaderNow()                   { g.wrote = true }
func (g *ginWriter) Flush()                            {}
func (g *ginWriter) Pusher() http.Pusher               { return nil }
func (g *ginWriter) CloseNotify() <-chan bool          { return make(chan bool) }

func (g *ginWriter) Size() int {
	if !g.wrote {
		return -1
	}
	return g.size
}

func (g *ginWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("httpidem: an idempotent route's response is buffered and cannot be hijacked")
}
