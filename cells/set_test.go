package cells_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("test-secret-0123456789")

// twoCells writes a map of two cells, each its own fresh database on the test server — a: acme,
// initech; b: globex — and returns its path.
func twoCells(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cells.yaml")
	writeMap(t, path, fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme, initech]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		pgtest.URL(t), pgtest.URL(t)))
	return path
}

func writeMap(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, path string) *cells.Set {
	t.Helper()
	m, err := cells.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cells.Open(context.Background(), m, cells.Options{Migrate: true, Claim: claim.Config{DigestSecret: secret, Owner: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// claimIn claims one key for tenant through the set and returns the key's row id.
func claimIn(t *testing.T, s *cells.Set, tenant, key string) int64 {
	t.Helper()
	c, err := s.For(tenant)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Store.Claim(context.Background(), claim.Request{Tenant: tenant, Operation: "charge", Key: key,
		Intent: []byte(`{"amount":1}`), Actor: "service:test"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != claim.Acquired {
		t.Fatalf("claim %s/%s: %s", tenant, key, out.Kind)
	}
	return out.KeyID
}

func count(t *testing.T, db *gorm.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Raw(q, args...).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestSet_RoutesEachTenantToItsOwnCellOnly(t *testing.T) {
	t.Parallel()
	s := open(t, twoCells(t))
	claimIn(t, s, "acme", "k1")
	claimIn(t, s, "globex", "k1")
	a, _ := s.Cell("a")
	b, _ := s.Cell("b")
	for _, tc := range []struct {
		cell   *cells.Cell
		tenant string
		want   int64
	}{{a, "acme", 1}, {a, "globex", 0}, {b, "globex", 1}, {b, "acme", 0}} {
		if n := count(t, tc.cell.DB, `SELECT count(*) FROM idempotency_keys WHERE tenant = ?`, tc.tenant); n != tc.want {
			t.Errorf("cell %s holds %d keys of %s, want %d", tc.cell.Name, n, tc.tenant, tc.want)
		}
	}
	if c := s.Control(); c.Name != "a" {
		t.Errorf("control %s, want a", c.Name)
	}
	if names := []string{s.Cells()[0].Name, s.Cells()[1].Name}; names[0] != "a" || names[1] != "b" {
		t.Errorf("cells %v", names)
	}
}

func TestSet_ATenantNotInTheMapHasNoCell(t *testing.T) {
	t.Parallel()
	s := open(t, twoCells(t))
	c, err := s.For("hooli")
	if !errors.Is(err, cells.ErrNoCell) || c != nil {
		t.Fatalf("For(hooli) = %v, %v; want ErrNoCell and no cell", c, err)
	}
	if !strings.Contains(err.Error(), `"hooli"`) || errs.KindOf(err) != errs.Unavailable {
		t.Errorf("error %q kind %v: want the tenant named, unavailable", err, errs.KindOf(err))
	}
	if st, err := s.StoreFor("hooli"); st != nil || !errors.Is(err, cells.ErrNoCell) {
		t.Errorf("StoreFor(hooli) = %v, %v", st, err)
	}
}

// TestOpen_RowIdsStayInTheCellsOwnRange: every sequence of a cell hands out ids from id<<40, so
// rows of different cells never share an id (a move copies rows with their ids).
func TestOpen_RowIdsStayInTheCellsOwnRange(t *testing.T) {
	t.Parallel()
	s := open(t, twoCells(t))
	for _, tc := range []struct {
		tenant string
		id     int64
	}{{"acme", 1}, {"globex", 2}} {
		id := claimIn(t, s, tc.tenant, "k")
		if id < tc.id<<40 || id >= (tc.id+1)<<40 {
			t.Errorf("%s's key id %d is outside cell %d's range [%d, %d)", tc.tenant, id, tc.id, tc.id<<40, (tc.id+1)<<40)
		}
		c, _ := s.For(tc.tenant)
		var below int64
		if err := c.DB.Raw(`SELECT count(*) FROM pg_sequences WHERE schemaname = current_schema() AND sequencename <> 'goose_db_version_id_seq' AND coalesce(last_value, 0) < ?`, tc.id<<40).Scan(&below).Error; err != nil {
			t.Fatal(err)
		}
		if below != 0 {
			t.Errorf("cell %d: %d sequences below the cell's range", tc.id, below)
		}
	}
}

// TestOpen_AgainKeepsTheSequencesWhereTheyAre: a second process opening the cell (or a restart)
// never moves a sequence back; ids keep growing.
func TestOpen_AgainKeepsTheSequencesWhereTheyAre(t *testing.T) {
	t.Parallel()
	path := twoCells(t)
	first := claimIn(t, open(t, path), "acme", "k1")
	second := claimIn(t, open(t, path), "acme", "k2")
	if second <= first {
		t.Errorf("id after reopening %d, before %d: the sequence went back", second, first)
	}
}

func TestOpen_RefusesTwoCellsOnOneDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	openRefused(t, fmt.Sprintf("cells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n", url, url),
		"two cells on one database", "cell b: its database is cell a (id 1), not b (id 2)")
}

func TestOpen_RefusesADatabaseHoldingAnotherCellsIds(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := openDB(t, url)
	pgtest.Exec(t, db, `SELECT setval('idempotency_keys_id_seq', ?)`, int64(3)<<40+5)
	openRefused(t, fmt.Sprintf("cells:\n  a: {id: 1, url: %q, tenants: [acme]}\n", url),
		"a database whose ids are another cell's", "public.idempotency_keys_id_seq is at 3298534883333, past the cell's id range")
}

// openRefused wants Open to refuse the map file's text with an error containing want.
func openRefused(t *testing.T, file, what, want string) {
	t.Helper()
	m, err := cells.Parse("m.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cells.Open(context.Background(), m, cells.Options{Claim: claim.Config{DigestSecret: secret}})
	if err == nil {
		s.Close()
		t.Fatalf("opened %s", what)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to contain %q", err, want)
	}
}

func TestRefresh_RoutesByTheRewrittenMap(t *testing.T) {
	t.Parallel()
	path := twoCells(t)
	s := open(t, path)
	moved, err := s.Map().WithTenantIn("acme", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := cells.Write(path, moved); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.For("acme"); c.Name != "a" {
		t.Fatalf("acme routed to %s before the refresh", c.Name)
	}
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, err := s.For("acme"); err != nil || c.Name != "b" {
		t.Errorf("acme after the refresh: %v, %v; want cell b", c, err)
	}
	// A map that does not load leaves the set routing as before.
	writeMap(t, path, "cells: {}\n")
	if err := s.Refresh(context.Background()); err == nil {
		t.Error("refreshed from a map with no cells")
	}
	if c, err := s.For("acme"); err != nil || c.Name != "b" {
		t.Errorf("acme after a refused refresh: %v, %v; want cell b still", c, err)
	}
}

func TestWatch_FollowsTheMapFileAMoveRewrites(t *testing.T) {
	t.Parallel()
	path := twoCells(t)
	s := open(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refreshed := make(chan error, 4)
	go s.Watch(ctx, 10*time.Millisecond, func(err error) { refreshed <- err })
	moved, err := s.Map().WithTenantIn("acme", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := cells.Write(path, moved); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refreshed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the set did not notice the rewritten map in 10 s")
	}
	if c, err := s.For("acme"); err != nil || c.Name != "b" {
		t.Errorf("acme after the watch refreshed: %v, %v; want cell b", c, err)
	}
}

func openDB(t *testing.T, url string) *gorm.DB {
	t.Helper()
	db, err := pgpool.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}
