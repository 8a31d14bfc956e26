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
// key); Middleware wraps an ordinary handler, captures its response into the snapshot, and lets
// the handler complete the key inside its own transaction with Complete.
package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
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
	Store  *claim.Store
	Tenant TenantFunc
	// Service names the caller in key events (actor service:NAME).
	Service string
	// MaxBodyBytes bounds request bodies (default 1 MiB).
	MaxBodyBytes int64
	// ProblemBase prefixes problem types (default "/problems/"); the service may serve docs there.
	ProblemBase string
	Logger      *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ProblemBase == "" {
		c.ProblemBase = "/problems/"
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
}

// Handler answers a route by running op through the claim logic. Validators run on the body
// before the claim: a refusal answers 400 invalid-field and stores nothing under the key.
func Handler(cfg Config, op claim.Operation, validators ...Validator) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	route := Route{Operation: op.Name(), Intent: op.Intent()}
	return func(c *gin.Context) {
		req, ok := readRequest(c, cfg, route)
		if !ok || !validate(c, cfg, req.Intent, validators) {
			return
		}
		out, err := cfg.Store.Run(c.Request.Context(), op, req)
		if err != nil {
			writeError(c, cfg, err)
			return
		}
		writeOutcome(c, cfg, out)
	}
}

type leaseKey struct{}

// Middleware wraps an ordinary handler. On a fresh claim it runs the handler with the lease in
// the request context (see Lease and Complete); unless the handler completed or released the key
// itself, the captured response becomes the snapshot: below 400 completes the key, 4xx fails it
// finally (replayed, as Stripe does), 5xx fails it retryably (the next attempt runs again, after
// checking nothing was left half-done).
func Middleware(cfg Config, route Route) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		req, ok := readRequest(c, cfg, route)
		if !ok {
			return
		}
		if req.Key == "" && len(route.Intent.NaturalKey) == 0 { // optional key, none sent
			c.Next()
			return
		}
		out, err := cfg.Store.Claim(c.Request.Context(), req)
		if err != nil {
			writeError(c, cfg, err)
			return
		}
		if out.Kind != claim.Acquired {
			writeOutcome(c, cfg, out)
			return
		}
		if out.Lease.MustCheckDownstream() {
			// A generic handler has no downstream lookup: an earlier attempt may have acted, so
			// only an Operation (Handler) or an operator may take this key over.
			_ = cfg.Store.Release(c.Request.Context(), out.Lease, "generic handler cannot check downstream")
			writeProblem(c, cfg, http.StatusConflict, "needs-recovery", "Earlier attempt unresolved",
				"an earlier attempt with this key did not finish; it needs recovery before a retry can run", nil)
			return
		}
		st := &leaseState{lease: out.Lease, cfg: cfg}
		rec := &recorder{ResponseWriter: c.Writer, limit: cfg.Store.Config().MaxSnapshotBytes}
		c.Writer = rec
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), leaseKey{}, st))
		c.Next()
		if st.done {
			return
		}
		ctx := context.WithoutCancel(c.Request.Context())
		snap := &claim.Snapshot{Status: rec.Status(), Headers: claim.SnapshotHeaders(rec.Header()), Body: rec.body.Bytes()}
		if rec.overflow {
			cfg.Logger.Warn("response too large to snapshot; key failed retryable", "digest", out.Digest)
			err = cfg.Store.Fail(ctx, nil, out.Lease, claim.RetryableFailure("snapshot_too_large", "response exceeded the snapshot limit"))
		} else {
			switch {
			case snap.Status < 400:
				err = cfg.Store.Complete(ctx, nil, out.Lease, snap)
			case snap.Status < 500:
				err = cfg.Store.Fail(ctx, nil, out.Lease, claim.FinalFailure("http_"+strconv.Itoa(snap.Status), http.StatusText(snap.Status), snap))
			default:
				err = cfg.Store.Fail(ctx, nil, out.Lease, claim.RetryableFailure("http_"+strconv.Itoa(snap.Status), http.StatusText(snap.Status)))
			}
		}
		if err != nil {
			cfg.Logger.Error("recording the response failed", "digest", out.Digest, "err", err)
		}
	}
}

type leaseState struct {
	lease *claim.Lease
	cfg   Config
	done  bool
}

// Lease returns the lease a Middleware-wrapped handler holds (nil outside one).
func Lease(c *gin.Context) *claim.Lease {
	if st, ok := c.Request.Context().Value(leaseKey{}).(*leaseState); ok {
		return st.lease
	}
	return nil
}

// Complete completes the key inside tx, the handler's own transaction, so the business rows and
// the key commit together; the handler then writes the same response itself.
func Complete(c *gin.Context, store *claim.Store, tx *gorm.DB, snap *claim.Snapshot) error {
	st, ok := c.Request.Context().Value(leaseKey{}).(*leaseState)
	if !ok {
		return errors.New("httpidem.Complete outside an idempotent route")
	}
	if err := store.Complete(c.Request.Context(), tx, st.lease, snap); err != nil {
		return err
	}
	st.done = true
	return nil
}

// Release gives the key up after a failure before any externally visible change (the request
// may be retried as new).
func Release(c *gin.Context, store *claim.Store, reason string) error {
	st, ok := c.Request.Context().Value(leaseKey{}).(*leaseState)
	if !ok {
		return errors.New("httpidem.Release outside an idempotent route")
	}
	st.done = true
	return store.Release(c.Request.Context(), st.lease, reason)
}

// readRequest authenticates, bounds and reads the body, and builds the claim request; on a
// problem it answers and reports false.
func readRequest(c *gin.Context, cfg Config, route Route) (claim.Request, bool) {
	tenant, err := cfg.Tenant(c)
	if err != nil || tenant == "" {
		writeProblem(c, cfg, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required", nil)
		return claim.Request{}, false
	}
	key, err := parseKeyHeader(c.Request.Header.Values(HeaderKey))
	if err != nil {
		writeProblem(c, cfg, http.StatusBadRequest, "key-malformed", "Malformed Idempotency-Key", err.Error(), nil)
		return claim.Request{}, false
	}
	natural := len(route.Intent.NaturalKey) > 0
	if key == "" && !natural && !route.KeyOptional {
		writeProblem(c, cfg, http.StatusBadRequest, "key-missing", "Idempotency-Key required",
			"this endpoint requires an Idempotency-Key header: 1-255 printable ASCII characters, generated before the first attempt and reused on every retry", nil)
		return claim.Request{}, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(c, cfg, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large",
				fmt.Sprintf("request body exceeds %d bytes", cfg.MaxBodyBytes), nil)
		} else {
			writeProblem(c, cfg, http.StatusBadRequest, "body-unreadable", "Request body unreadable", err.Error(), nil)
		}
		return claim.Request{}, false
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	return claim.Request{Tenant: tenant, Operation: route.Operation, Key: key, Intent: body, Spec: route.Intent,
		Actor: "service:" + cfg.Service}, true
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

// recorder tees the handler's response into a bounded buffer for the snapshot.
type recorder struct {
	gin.ResponseWriter
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (r *recorder) Write(b []byte) (int, error) {
	r.capture(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) WriteString(s string) (int, error) {
	r.capture([]byte(s))
	return r.ResponseWriter.WriteString(s)
}

func (r *recorder) capture(b []byte) {
	if r.overflow {
		return
	}
	if r.body.Len()+len(b) > r.limit {
		r.overflow = true
		return
	}
	r.body.Write(b)
}
