package cells_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// lateCells writes a map of cell a (acme, control) on a fresh database and cell b (globex) on
// lateURL, and opens it with a logger whose records go to logs.
func lateCells(t *testing.T, lateURL string, logs chan<- slog.Record) (*cells.Set, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cells.yaml")
	writeMap(t, path, fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		pgtest.URL(t), lateURL))
	m, err := cells.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cells.Open(context.Background(), m, cells.Options{Migrate: true, Claim: claim.Config{DigestSecret: secret, Owner: "test"},
		RetryMax: 200 * time.Millisecond, Logger: slog.New(recordHandler(logs))})
	if err == nil {
		t.Cleanup(s.Close)
	}
	return s, err
}

// A cell whose database is down when the set opens does not keep the set from opening: its
// tenants are refused as in a failover while every other cell serves, nothing connects to it
// before it answered and was checked, and once it answers its tenants are served in its own id
// range.
func TestOpen_ACellDownAtStartIsServedOnceItAnswers(t *testing.T) {
	t.Parallel()
	lateURL, up := pgtest.Late(t, pgtest.URL(t))
	logs := make(chan slog.Record, 100)
	s, err := lateCells(t, lateURL, logs)
	if err != nil {
		t.Fatalf("open with cell b down: %v", err)
	}
	claimIn(t, s, "acme", "k1")

	b, _ := s.Cell("b")
	_, err = s.For("globex")
	var down *cells.CellDownError
	if !errors.As(err, &down) || down.Cell != "b" || !claim.Unreachable(err) || errs.KindOf(err) != errs.Unavailable {
		t.Fatalf("For(globex) with cell b down: %v; want a CellDownError naming b, unreachable, unavailable", err)
	}
	if st, err := s.StoreFor("globex"); st != nil || !errors.As(err, &down) {
		t.Errorf("StoreFor(globex) = %v, %v", st, err)
	}
	if b.Err() == nil || len(s.Cells()) != 2 || s.Stores()["b"] != b.Store {
		t.Fatalf("cell b: err %v, cells %d, its store listed %v", b.Err(), len(s.Cells()), s.Stores()["b"] == b.Store)
	}
	// Its pool connects to nothing yet: the set's checks come first.
	if err := b.DB.Exec(`SELECT 1`).Error; !errors.As(err, &down) {
		t.Errorf("a statement on cell b's pool while it is down: %v, want its CellDownError", err)
	}
	select {
	case <-b.Up():
		t.Fatal("cell b is up while its database resets every connection")
	default:
	}
	wantLog(t, logs, slog.LevelWarn, "cannot be reached")

	up()
	select {
	case <-b.Up():
	case <-time.After(60 * time.Second):
		t.Fatalf("cell b not up a minute after its database answers: %v", b.Err())
	}
	wantLog(t, logs, slog.LevelInfo, "reached and checked")
	if id := claimIn(t, s, "globex", "k1"); id < 2<<40 || id >= 3<<40 {
		t.Errorf("globex's first key in cell b has id %d, outside b's id range", id)
	}
	var name string
	if err := b.DB.Raw(`SELECT name FROM cell_identity`).Scan(&name).Error; err != nil || name != "b" {
		t.Errorf("cell b's identity %q, %v", name, err)
	}
	claimIn(t, s, "acme", "k2")
}

// A cell that comes up as another cell's database is refused by the same check Open makes: its
// tenants stay unavailable, the log says why, and nothing of its own pool reached it.
func TestOpen_ACellDownAtStartIsCheckedBeforeUse(t *testing.T) {
	t.Parallel()
	other := pgtest.URL(t)
	pgtest.Exec(t, pgtest.Open(t, other), `INSERT INTO cell_identity (name, id) VALUES ('z', 9)`)
	lateURL, up := pgtest.Late(t, other)
	logs := make(chan slog.Record, 100)
	s, err := lateCells(t, lateURL, logs)
	if err != nil {
		t.Fatal(err)
	}
	up()
	rec := wantLog(t, logs, slog.LevelError, "answers but is refused")
	if got := attr(rec, "err"); !strings.Contains(got, "its database is cell z (id 9), not b (id 2)") {
		t.Errorf("refusal logged as %q", got)
	}
	b, _ := s.Cell("b")
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "its database is cell z") {
		t.Errorf("cell b's error %v, want the identity refusal", err)
	}
	if _, err := s.For("globex"); !claim.Unreachable(err) {
		t.Errorf("For(globex) on a refused cell: %v", err)
	}
	var down *cells.CellDownError
	if err := b.DB.Exec(`SELECT 1`).Error; !errors.As(err, &down) {
		t.Errorf("a statement on a refused cell's pool: %v, want its CellDownError", err)
	}
	claimIn(t, s, "acme", "k1")
}

// What is not an outage is refused at Open as before, in one line naming the cell: here a
// database the server does not have.
func TestOpen_ACellMisconfiguredIsStillRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	i := strings.LastIndex(url, "/")
	j := strings.Index(url[i:], "?")
	bad := url[:i] + "/no_such_database_here" + url[i+j:]
	_, err := lateCells(t, bad, make(chan slog.Record, 100))
	if err == nil || !strings.HasPrefix(err.Error(), "cell b: connect: ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open with cell b's database missing: %v; want one line refusing cell b", err)
	}
}

// wantLog waits for a record of level whose message contains msg.
func wantLog(t *testing.T, logs <-chan slog.Record, level slog.Level, msg string) slog.Record {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case r := <-logs:
			if r.Level == level && strings.Contains(r.Message, msg) {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s log %q in a minute", level, msg)
		}
	}
}

func attr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
		}
		return true
	})
	return v
}

// recordHandler sends every record to out (dropping them when it is full).
type recordHandler chan<- slog.Record

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// A cell URL may carry pgx's own settings, as one behind pgbouncer does
// (default_query_exec_mode): the check that the cell answers at start reads them as the pool does
// and does not send them to the server — which refused them as startup parameters, so the cell
// started down and stayed down for the whole run (the two-cell chaos run's cell b).
func TestOpen_ACellURLWithPgxSettingsIsReached(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	logs := make(chan slog.Record, 100)
	s, err := lateCells(t, url+sep+"default_query_exec_mode=exec", logs)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	b, _ := s.Cell("b")
	if err := b.Err(); err != nil {
		t.Fatalf("cell b started down: %v", err)
	}
	claimIn(t, s, "globex", "k1")
}
