package claim

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemops/idemops/errs"
)

// ConnLost reports whether err means the connection to PostgreSQL went away (the server
// crashed, failed over, or terminated the backend) — so a statement that was sent may or may not
// have committed. A statement PostgreSQL answered with an ordinary error did not commit; one
// never sent (pgconn.SafeToRetry) did not either, but is reported here too: both are re-read.
func ConnLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false // the caller gave up: nobody is left to learn the outcome
	}
	// A deadline may be the caller's (reread stops at once when the caller's context is done)
	// or the driver's connect_timeout while a standby is promoted (lost, keep trying).
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case pe.Code == "25006": // read-only transaction: we reached a demoted primary
			return true
		}
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return pgconn.SafeToRetry(err)
}

// An error that reaches an edge because the database could not be reached is errs.Unavailable
// (503, exit 1, a fixed message), not Internal.
func init() { errs.Unreachable(Unreachable) }

// Unreachable says whether err means the database could not be reached, for an edge choosing
// its answer (503, Unavailable): ConnLost narrowed, since a context's own deadline is the
// caller's time running out (Internal), not the database going away — unless it cut a
// connection attempt short.
func Unreachable(err error) bool {
	if errors.Is(err, ErrStoreDown) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		var ce *pgconn.ConnectError
		return errors.As(err, &ce)
	}
	return ConnLost(err)
}

// ErrStoreDown marks an error of a store that is known to be down before anything is sent to
// it — a tenant cell not reached since the process started (cells.CellDownError): Unreachable,
// so an edge answers it as it answers a failover (503 or Unavailable, retry with the same key).
// Nothing was sent, so it is not ConnLost: there is no outcome to re-read.
var ErrStoreDown = errs.New(errs.Unavailable, "the idempotency store is down")

// DefaultReconnectWindow is how long the store keeps trying to learn the outcome of a statement
// whose connection was lost (Config.ReconnectWindow): long enough for a standby to be promoted.
const DefaultReconnectWindow = 30 * time.Second

// reread runs read until it gets an answer over a working connection, backing off while the
// database is unreachable (a failover in progress), for at most the reconnect window. read must
// be read-only or a compare-and-set: it decides what a statement of unknown outcome did; it
// never repeats the statement blindly.
func (s *Store) reread(ctx context.Context, read func(ctx context.Context) error) error {
	deadline := time.Now().Add(s.cfg.ReconnectWindow)
	wait := 50 * time.Millisecond
	for {
		err := read(ctx)
		if err == nil || !ConnLost(err) {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, time.Second)
	}
}

// leaseRow is what a holder re-reads of its key after a lost connection.
type leaseRow struct {
	Token *string
	State State
}

func (s *Store) readLease(ctx context.Context, keyID int64) (*leaseRow, error) {
	var rows []leaseRow
	if err := s.db.WithContext(ctx).Raw(`SELECT lease_token::text AS token, state FROM idempotency_keys WHERE id = ?`, keyID).
		Scan(&rows).Error; err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// holderOutcome re-reads a key after a holder's write lost its connection: applied means the
// write (or an equivalent one) took effect; otherwise, while the token is still the holder's,
// nothing was written and the compare-and-set may run again.
func (s *Store) holderOutcome(ctx context.Context, l *Lease, wants ...State) (applied, stillHeld bool, err error) {
	var r *leaseRow
	if err := s.reread(ctx, func(ctx context.Context) error {
		var err error
		r, err = s.readLease(ctx, l.KeyID)
		return err
	}); err != nil {
		return false, false, err
	}
	if r != nil && r.Token != nil && *r.Token == l.Token {
		return false, true, nil
	}
	for _, w := range wants {
		if r != nil && r.Token == nil && r.State == w {
			return true, false, nil
		}
	}
	return false, false, nil
}
