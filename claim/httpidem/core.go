package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// This file is the contract on plain net/http: Wrap is standard middleware
// (func(http.Handler) http.Handler, so chi, echo's WrapMiddleware and http.ServeMux take it) and
// OperationHandler is an http.Handler. The gin API in httpidem.go is a thin adapter over them.

// tenantFunc authenticates one request.
type tenantFunc func(*http.Request) (string, error)

func (c Config) requestTenant() tenantFunc {
	if c.TenantFromRequest != nil {
		return c.TenantFromRequest
	}
	return func(*http.Request) (string, error) {
		return "", errors.New("httpidem: Config.TenantFromRequest is not set")
	}
}

// OperationHandler is Handler for net/http: it answers a route by running op through the claim
// logic, after the validators.
func OperationHandler(cfg Config, op claim.Operation, validators ...Validator) http.Handler {
	cfg = cfg.withDefaults()
	tenant := cfg.requestTenant()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveOperation(w, r, cfg, tenant, op, validators)
	})
}

func serveOperation(w http.ResponseWriter, r *http.Request, cfg Config, tenant tenantFunc, op claim.Operation, validators []Validator) {
	route := Route{Operation: op.Name(), Intent: op.Intent()}
	req, cfg, ok := readRequest(w, r, cfg, route, tenant)
	if !ok || !validate(w, cfg, req.Intent, validators) {
		return
	}
	out, err := cfg.Store.Run(r.Context(), op, req)
	if err != nil {
		writeError(w, r, cfg, err)
		return
	}
	writeOutcome(w, r, cfg, op.Name(), out)
}

// LocalHandler answers a route whose effects are all rows in this database through the
// one-commit path (claim.Store.RunLocal): the claim, fn's rows and the completion commit
// together, so a racing duplicate waits on the unique index and replays, an error rolls the key
// back with the rows (the retry executes), and a final *claim.Failure is recorded and replayed.
// Validators run before anything is claimed, as for OperationHandler.
func LocalHandler(cfg Config, route Route, fn claim.LocalFunc, validators ...Validator) http.Handler {
	cfg = cfg.withDefaults()
	tenant := cfg.requestTenant()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveLocal(w, r, cfg, tenant, route, fn, validators)
	})
}

func serveLocal(w http.ResponseWriter, r *http.Request, cfg Config, tenant tenantFunc, route Route, fn claim.LocalFunc, validators []Validator) {
	req, cfg, ok := readRequest(w, r, cfg, route, tenant)
	if !ok || !validate(w, cfg, req.Intent, validators) {
		return
	}
	out, err := cfg.Store.RunLocal(r.Context(), req, fn)
	if err != nil {
		writeError(w, r, cfg, err)
		return
	}
	writeOutcome(w, r, cfg, route.Operation, out)
}

// Wrap is Middleware for net/http: func(http.Handler) http.Handler with the same semantics.
// The wrapped handler finds its transaction with TxFrom(r.Context()).
func Wrap(cfg Config, route Route) func(http.Handler) http.Handler {
	cfg = cfg.withDefaults()
	tenant := cfg.requestTenant()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveMiddleware(w, r, cfg, tenant, route, next)
		})
	}
}

type leaseKey struct{}

// leaseState is what a wrapped handler's context carries: the lease, the route's transaction,
// and whether the handler settled the key itself.
type leaseState struct {
	lease     *claim.Lease
	cfg       Config
	tx        *gorm.DB
	completed bool // the handler completed the key (CompleteContext)
	released  bool // the handler released or refused it (ReleaseContext, RefuseRequest)
}

func stateFrom(ctx context.Context) (*leaseState, bool) {
	st, ok := ctx.Value(leaseKey{}).(*leaseState)
	return st, ok
}

// TxFrom returns the transaction a wrapped handler does its database work in (nil outside one).
// It commits together with the key when the response is below 500 and rolls back otherwise,
// so a failed attempt leaves nothing behind and the next retry with the key executes again.
func TxFrom(ctx context.Context) *gorm.DB {
	if st, ok := stateFrom(ctx); ok {
		return st.tx
	}
	return nil
}

// LeaseFrom returns the lease a wrapped handler holds (nil outside one).
func LeaseFrom(ctx context.Context) *claim.Lease {
	if st, ok := stateFrom(ctx); ok {
		return st.lease
	}
	return nil
}

// CompleteContext completes the key inside tx (the route's TxFrom, or the handler's own
// transaction) with snap; the handler then writes the same response itself.
func CompleteContext(ctx context.Context, tx *gorm.DB, snap *claim.Snapshot) error {
	st, ok := stateFrom(ctx)
	if !ok {
		return errors.New("httpidem.Complete outside an idempotent route")
	}
	if err := st.cfg.Store.Complete(ctx, tx, st.lease, snap); err != nil {
		return err
	}
	st.completed = true
	return nil
}

// ReleaseContext gives the key up after a failure before any externally visible change (the
// request may be retried as new); the route's transaction rolls back.
func ReleaseContext(ctx context.Context, reason string) error {
	st, ok := stateFrom(ctx)
	if !ok {
		return errors.New("httpidem.Release outside an idempotent route")
	}
	st.released = true
	return st.cfg.Store.Release(context.WithoutCancel(ctx), st.lease, reason)
}

// serveMiddleware is the whole contract of a wrapped route.
//
// Failure paths, so that no key is ever stuck behind an endless 409:
//   - By default (Route.External false) the handler's database work runs in the route's
//     transaction (TxFrom) and the key's final write joins it. A 5xx (or a panic) rolls it back
//     and leaves the key failed_retryable: nothing happened, so the next retry with the same key
//     and intent executes again (attempt + 1), and so does a retry after a crash.
//   - A route that declares External side effects has no downstream lookup: a 5xx is stored and
//     replayed (Stripe's rule) and the key is held, and so is a retry that finds an earlier
//     attempt crashed; an operator releases it for another attempt or marks it final (console).
func serveMiddleware(w http.ResponseWriter, r *http.Request, cfg Config, tenant tenantFunc, route Route, next http.Handler) {
	req, cfg, ok := readRequest(w, r, cfg, route, tenant)
	if !ok {
		return
	}
	if req.Key == "" { // optional key, none sent
		next.ServeHTTP(w, r)
		return
	}
	out, err := cfg.Store.Claim(r.Context(), req)
	if err != nil {
		writeError(w, r, cfg, err)
		return
	}
	if out.Kind != claim.Acquired {
		writeOutcome(w, r, cfg, route.Operation, out)
		return
	}
	ctx := context.WithoutCancel(r.Context()) // the key's record must outlive the caller
	if route.External && out.Lease.MustCheckDownstream() {
		// An earlier attempt may have acted outside and this route cannot look that up.
		snap := problemSnapshot(cfg, http.StatusInternalServerError, "outcome-unknown", "Outcome unknown",
			"an earlier attempt with this Idempotency-Key did not finish and may have taken effect; it is held for an operator to resolve")
		if err := cfg.Store.Fail(ctx, nil, out.Lease, claim.HeldFailure("outcome_unknown", "earlier attempt did not finish", snap)); err != nil {
			writeError(w, r, cfg, err)
			return
		}
		cfg.Logger.Warn("key held: earlier attempt unresolved on a route with external effects", "digest", out.Digest)
		writeSnapshot(w, snap, false)
		return
	}
	tx := cfg.Store.DB().WithContext(ctx).Begin()
	if tx.Error != nil {
		_ = cfg.Store.Release(ctx, out.Lease, "could not begin the route's transaction")
		writeError(w, r, cfg, fmt.Errorf("begin: %w", tx.Error))
		return
	}
	st := &leaseState{lease: out.Lease, cfg: cfg, tx: tx}
	buf := &buffer{header: http.Header{}, limit: cfg.Store.Config().MaxSnapshotBytes}
	// The lease is renewed while the handler runs, so a slow handler is not taken over.
	hctx, stopRenewing := cfg.Store.KeepRenewed(r.Context(), out.Lease)
	finished := false
	defer func() {
		if finished {
			return
		}
		stopRenewing()
		p := recover() // a panicking handler is a 5xx: record it, then let the panic go on
		tx.Rollback()
		snap := problemSnapshot(cfg, http.StatusInternalServerError, "internal", "Internal error", "")
		recordServerError(ctx, cfg, route, st, snap)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(buf, r.WithContext(context.WithValue(hctx, leaseKey{}, st)))
	finished = true
	stopRenewing()
	finishMiddleware(ctx, w, r, cfg, route, st, buf)
}

// finishMiddleware turns the handler's buffered response into the key's record and only then
// sends it, so the client never sees an answer whose record did not commit.
func finishMiddleware(ctx context.Context, w http.ResponseWriter, r *http.Request, cfg Config, route Route, st *leaseState, buf *buffer) {
	digest := st.lease.Digest
	switch {
	case st.released:
		st.tx.Rollback()
		buf.sendTo(w)
		return
	case st.completed:
		if err := st.tx.Commit().Error; err != nil {
			cfg.Logger.Error("committing the route's transaction failed", "digest", digest, "err", err)
			recordServerError(ctx, cfg, route, st, problemSnapshot(cfg, http.StatusInternalServerError, "internal", "Internal error", ""))
			writeProblem(w, cfg, http.StatusInternalServerError, "internal", "Internal error", "", nil)
			return
		}
		buf.sendTo(w)
		return
	case buf.overflow:
		st.tx.Rollback()
		cfg.Logger.Warn("response too large to snapshot", "digest", digest, "limit", buf.limit)
		snap := problemSnapshot(cfg, http.StatusInternalServerError, "response-too-large", "Response too large",
			fmt.Sprintf("the response exceeded the %d-byte snapshot limit of an idempotent route", buf.limit))
		recordServerError(ctx, cfg, route, st, snap)
		writeSnapshot(w, snap, false)
		return
	}
	snap := &claim.Snapshot{Status: buf.status(), Headers: claim.SnapshotHeaders(buf.header), Body: buf.body.Bytes()}
	if snap.Status >= 500 {
		st.tx.Rollback()
		recordServerError(ctx, cfg, route, st, snap)
		buf.sendTo(w)
		return
	}
	var err error
	if snap.Status < 400 {
		err = cfg.Store.Complete(ctx, st.tx, st.lease, snap)
	} else {
		err = cfg.Store.Fail(ctx, st.tx, st.lease, claim.FinalFailure("http_"+strconv.Itoa(snap.Status), http.StatusText(snap.Status), snap))
	}
	if err == nil {
		err = st.tx.Commit().Error
	} else {
		st.tx.Rollback()
	}
	switch {
	case errors.Is(err, claim.ErrLeaseLost), errors.Is(err, claim.ErrTenantMoving):
		// another attempt took the key over (its answer stands), or the tenant was frozen for a
		// move before the record committed (the key is taken over in its new cell)
		writeError(w, r, cfg, err)
	case err != nil:
		cfg.Logger.Error("recording the response failed", "digest", digest, "err", err)
		recordServerError(ctx, cfg, route, st, problemSnapshot(cfg, http.StatusInternalServerError, "internal", "Internal error", ""))
		writeProblem(w, cfg, http.StatusInternalServerError, "internal", "Internal error", "", nil)
	default:
		buf.sendTo(w)
	}
}

// recordServerError records a 5xx attempt whose transaction rolled back: retryable on a
// database-only route (nothing happened), held with the answer replayed on an External route.
func recordServerError(ctx context.Context, cfg Config, route Route, st *leaseState, snap *claim.Snapshot) {
	code := "http_" + strconv.Itoa(snap.Status)
	f := claim.RetryableFailure(code, http.StatusText(snap.Status))
	if route.External {
		f = claim.HeldFailure(code, http.StatusText(snap.Status), snap)
	}
	if err := cfg.Store.Fail(ctx, nil, st.lease, f); err != nil && !errors.Is(err, claim.ErrLeaseLost) {
		cfg.Logger.Error("recording a failed attempt failed", "digest", st.lease.Digest, "err", err)
	}
}

// readRequest authenticates, picks the tenant's store (Config.Stores), bounds and reads the
// body, and builds the claim request; it returns cfg with the tenant's store in it. On a
// problem it answers and reports false.
func readRequest(w http.ResponseWriter, r *http.Request, cfg Config, route Route, tenant tenantFunc) (claim.Request, Config, bool) {
	t, err := tenant(r)
	if err != nil || t == "" {
		writeProblem(w, cfg, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required", nil)
		return claim.Request{}, cfg, false
	}
	cfg, ok := cfg.forTenant(w, r, t)
	if !ok {
		return claim.Request{}, cfg, false
	}
	key, err := parseKeyHeader(r.Header.Values(HeaderKey))
	if err != nil {
		keyProblem(w, r, cfg, route.Operation, Problem{Type: cfg.ProblemBase + "key-malformed", Title: "Malformed Idempotency-Key",
			Status: http.StatusBadRequest, Detail: err.Error()})
		return claim.Request{}, cfg, false
	}
	if key == "" && !route.KeyOptional {
		keyProblem(w, r, cfg, route.Operation, Problem{Type: cfg.ProblemBase + "key-missing", Title: "Idempotency-Key required",
			Status: http.StatusBadRequest,
			Detail: "this endpoint requires an Idempotency-Key header: 1-255 printable ASCII characters, generated before the first attempt and reused on every retry"})
		return claim.Request{}, cfg, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, cfg, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large",
				fmt.Sprintf("request body exceeds %d bytes", cfg.MaxBodyBytes), nil)
		} else {
			writeProblem(w, cfg, http.StatusBadRequest, "body-unreadable", "Request body unreadable", err.Error(), nil)
		}
		return claim.Request{}, cfg, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return claim.Request{Tenant: t, Operation: route.Operation, Key: key, Intent: body, Spec: route.Intent,
		Actor: "service:" + cfg.Service}, cfg, true
}

// buffer holds a wrapped handler's response until the key's record is written: bounded by the
// snapshot limit (a larger response cannot be replayed, so it is refused as a whole).
type buffer struct {
	header   http.Header
	code     int
	wrote    bool
	size     int
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) WriteHeader(code int) {
	if !b.wrote {
		b.code = code
	}
}

func (b *buffer) Write(p []byte) (int, error) {
	b.wrote = true
	b.size += len(p)
	if !b.overflow {
		if b.body.Len()+len(p) > b.limit {
			b.overflow = true
			b.body.Reset()
		} else {
			b.body.Write(p)
		}
	}
	return len(p), nil
}

func (b *buffer) status() int {
	if b.code == 0 {
		return http.StatusOK
	}
	return b.code
}

// sendTo writes the buffered response (all its headers, not only the snapshot's) to w.
func (b *buffer) sendTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = v
	}
	w.WriteHeader(b.status())
	_, _ = w.Write(b.body.Bytes())
}
