package claim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// cutProxy sits between the store and PostgreSQL. Armed with a trigger, it forwards the first
// client message holding those bytes to the server, lets the server run it (and commit), then
// closes both sides without passing the answer on: the client's statement has an unknown
// outcome, the way a failover or a network cut leaves it.
type cutProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	trigger  []byte
	cuts     atomic.Int64
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *cutProxy) arm(trigger string) {
	p.mu.Lock()
	p.trigger = []byte(trigger)
	p.mu.Unlock()
}

// take disarms and reports whether chunk holds the trigger.
func (p *cutProxy) take(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.trigger) == 0 || !bytes.Contains(chunk, p.trigger) {
		return false
	}
	p.trigger = nil
	return true
}

func (p *cutProxy) serve() {
	for {
		cli, err := p.ln.Accept()
		if err != nil {
			return
		}
		srv, err := net.Dial("tcp", p.upstream)
		if err != nil {
			cli.Close()
			continue
		}
		var blocked atomic.Bool
		go func() { // server → client, until the cut
			buf := make([]byte, 64<<10)
			for {
				n, err := srv.Read(buf)
				if n > 0 && !blocked.Load() {
					if _, werr := cli.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					cli.Close()
					return
				}
			}
		}()
		go func() { // client → server, watching for the trigger
			defer srv.Close()
			defer cli.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := cli.Read(buf)
				if n > 0 {
					cut := p.take(buf[:n])
					if cut {
						blocked.Store(true)
					}
					if _, werr := srv.Write(buf[:n]); werr != nil {
						return
					}
					if cut {
						time.Sleep(300 * time.Millisecond) // the server runs and commits; its answer goes nowhere
						p.cuts.Add(1)
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// proxied opens a store on a fresh database through a cutProxy.
func proxied(t *testing.T) (*bundle, *cutProxy) {
	t.Helper()
	t.Parallel()
	raw := pgtest.URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("default_query_exec_mode", "exec") // the SQL text goes out on every execution, for the trigger
	u.RawQuery = q.Encode()
	db, err := pgpool.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	s, err := claim.NewStore(db, claim.Config{DigestSecret: secret, Owner: "test", ReconnectWindow: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, db: db, store: s}, p
}

// A claim whose insert committed but whose answer was lost is read back as ours: Acquired, one
// row, one claimed event — not "in progress" against itself until its own lease lapses.
func TestClaim_LostAnswerAfterCommitIsReadBackAsOurs(t *testing.T) {
	b, p := proxied(t)
	ctx := context.Background()
	p.arm("INSERT INTO idempotency_keys (tenant")
	out, err := b.store.Claim(ctx, req("lost-1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	if p.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", p.cuts.Load())
	}
	if out.Kind != claim.Acquired || out.Lease == nil {
		t.Fatalf("claim after a lost answer: %+v", out)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`); n != 1 {
		t.Fatalf("%d rows", n)
	}
	if got := strings.Join(b.events(out.KeyID), ","); got != "claimed" {
		t.Fatalf("history %s", got)
	}
	// The lease we got back is the real one: it completes the key.
	snap := &claim.Snapshot{Status: 201, Body: []byte(`{}`), ResourceID: "r1"}
	if err := b.store.Complete(ctx, nil, out.Lease, snap); err != nil {
		t.Fatal(err)
	}
	if st := b.state(out.KeyID); st != claim.StateCompleted {
		t.Fatalf("state %s", st)
	}
}

// The completing transaction's COMMIT went through but its answer was lost: Run re-reads the
// key, finds it completed and answers Completed — without running the transaction again.
func TestRun_LostCommitAnswerCompletesOnce(t *testing.T) {
	b, p := proxied(t)
	op := newFakeOp()
	p.arm("commit\x00")
	out, err := b.store.Run(context.Background(), op, req("lost-2", payment(200)))
	if err != nil {
		t.Fatal(err)
	}
	if p.cuts.Load() != 1 || out.Kind != claim.Completed || out.Snapshot == nil {
		t.Fatalf("cuts %d, outcome %+v", p.cuts.Load(), out)
	}
	if op.executes.Load() != 1 || op.applies.Load() != 1 {
		t.Fatalf("executes %d applies %d, want 1 and 1", op.executes.Load(), op.applies.Load())
	}
	if got := strings.Join(b.events(out.KeyID), ","); got != "claimed,completed" {
		t.Fatalf("history %s", got)
	}
}

// Cut before the COMMIT: the transaction rolled back, our token is still on the key, so the
// transaction (Apply + complete) runs again, once, and the key completes; downstream is not
// called again.
func TestRun_LostConnectionBeforeCommitRunsTheTransactionAgain(t *testing.T) {
	b, p := proxied(t)
	op := newFakeOp()
	p.arm("SET state = 'completed'")
	out, err := b.store.Run(context.Background(), op, req("lost-3", payment(300)))
	if err != nil {
		t.Fatal(err)
	}
	if p.cuts.Load() != 1 || out.Kind != claim.Completed {
		t.Fatalf("cuts %d, outcome %+v", p.cuts.Load(), out)
	}
	if op.executes.Load() != 1 || op.applies.Load() != 2 {
		t.Fatalf("executes %d applies %d, want 1 and 2", op.executes.Load(), op.applies.Load())
	}
	if got := strings.Join(b.events(out.KeyID), ","); got != "claimed,completed" {
		t.Fatalf("history %s", got)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`); n != 1 {
		t.Fatalf("%d completed keys", n)
	}
}

// pg_terminate_backend of the backend running the claim (here while its insert waits on a
// lock): the claim is re-read (no row: it never committed), then inserted again, and acquired.
func TestClaim_TerminatedBackendIsReadAgainThenClaimed(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	sqlDB, _ := b.db.DB()
	blocker, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.ExecContext(ctx, `LOCK TABLE idempotency_keys IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out *claim.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.store.Claim(ctx, req("killed-1", payment(400)))
		done <- result{out, err}
	}()
	pid := pgtest.AwaitLockWait(t, b.db, 5*time.Second, "INSERT INTO idempotency_keys")
	var ok bool
	if err := b.db.Raw(`SELECT pg_terminate_backend(?)`, pid).Scan(&ok).Error; err != nil || !ok {
		t.Fatalf("terminate %d: %v %v", pid, ok, err)
	}
	// The claim re-reads (finds nothing) and inserts again on a new backend: wait for it, then
	// let it through.
	pgtest.AwaitLockWait(t, b.db, 5*time.Second, "INSERT INTO idempotency_keys", pid)
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.out.Kind != claim.Acquired {
		t.Fatalf("claim: %+v %v", r.out, r.err)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys`); n != 1 {
		t.Fatalf("%d rows", n)
	}
	if got := strings.Join(b.events(r.out.KeyID), ","); got != "claimed" {
		t.Fatalf("history %s", got)
	}
}

func TestConnLost_SortsErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "25006"}, true},
		{fmt.Errorf("claim x: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{errors.New("apply: boom"), false},
		{fmt.Errorf("claim: %w", context.Canceled), false},
		{fmt.Errorf("connect: %w", context.DeadlineExceeded), true}, // connect_timeout during a promotion
		{nil, false},
	} {
		if got := claim.ConnLost(c.err); got != c.want {
			t.Errorf("ConnLost(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// An unreachable database is Unavailable at every edge — 503 with a fixed message that names no
// host — while an error the database answered (a constraint, a syntax error) stays Internal.
func TestUnreachableDatabase_IsUnavailableAtTheEdges(t *testing.T) {
	db, addr := pgtest.Unreachable(t)
	// The claim's outcome is unknown, so it re-reads the key until the window closes.
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("0123456789abcdef-secret"), ReconnectWindow: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Claim(context.Background(), claim.Request{Tenant: "t1", Operation: "payment.charge", Key: "k-1",
		Intent: []byte(`{"amount_minor":100,"currency":"CNY"}`), Actor: "service:test"})
	if err == nil {
		t.Fatal("a claim against a closed port succeeded")
	}
	if got := errs.Status(err); got != http.StatusServiceUnavailable {
		t.Errorf("status of %v = %d, want 503", err, got)
	}
	if got := errs.Exit(err); got != 1 {
		t.Errorf("exit code = %d, want 1 (a failure, not bad input)", got)
	}
	if msg := errs.Message(err); strings.Contains(msg, addr) || !strings.Contains(msg, "cannot be reached") {
		t.Errorf("message %q: want the fixed sentence, without the address", msg)
	}
	answered := &pgconn.PgError{Code: "23505", Message: "duplicate key value"}
	if got := errs.Status(fmt.Errorf("insert: %w", answered)); got != http.StatusInternalServerError {
		t.Errorf("an error the database answered: status %d, want 500", got)
	}
	if got := errs.Status(fmt.Errorf("load: %w", context.DeadlineExceeded)); got != http.StatusInternalServerError {
		t.Errorf("the caller's own deadline: status %d, want 500", got)
	}
}
