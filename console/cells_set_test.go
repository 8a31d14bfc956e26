package console

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// CellsOf gives the console a tenant handle on every cell — its own for the control cell — and
// the placement of the set's map, which follows the map file once a move has switched it.
func TestCellsOf_HandlesAndPlacementFollowTheMapFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urlA, urlB := pgtest.URL(t), pgtest.URL(t)
	m, err := cells.New("a", []cells.CellSpec{{Name: "a", ID: 1, URL: urlA, Tenants: []string{"acme"}},
		{Name: "b", ID: 2, URL: urlB, Tenants: []string{"globex", "initech"}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cells.yaml")
	if err := cells.Write(path, m); err != nil {
		t.Fatal(err)
	}
	if m, err = cells.Load(path); err != nil {
		t.Fatal(err)
	}
	set, err := cells.Open(ctx, m, cells.Options{Claim: claim.Config{DigestSecret: testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	control, err := tenantdb.Open(urlA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := control.DB(); err == nil {
			sqlDB.Close()
		}
	})
	cs, closeCells, err := CellsOf(set, control, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeCells)

	got := cs.Cells()
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("cells %+v, want a and b in the map's order", got)
	}
	if got[0].DB != control {
		t.Error("the control cell does not use the console's own handle")
	}
	if !tenantdb.Scoped(got[1].DB) {
		t.Error("cell b's handle is not a tenant handle (tenantdb.Open)")
	}
	var name string
	if err := got[1].DB.WithContext(tenantdb.WithTenants(ctx, []string{"*"})).Raw(`SELECT name FROM cell_identity`).Scan(&name).Error; err != nil || name != "b" {
		t.Errorf("cell b's handle reaches the database of cell %q (%v)", name, err)
	}
	want := map[string]string{"acme": "a", "globex": "b", "initech": "b"}
	if p := cs.Placement(); len(p) != 3 || p["acme"] != "a" || p["globex"] != "b" || p["initech"] != "b" {
		t.Errorf("placement %v, want %v", p, want)
	}

	// A move switches the file; the set follows it (Set.Watch: Refresh), and so does the console.
	moved, err := m.WithTenantIn("globex", "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := cells.Write(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := set.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if p := cs.Placement(); p["globex"] != "a" || p["initech"] != "b" {
		t.Errorf("after the switch: placement %v, want globex in a", p)
	}

	// A cell the map adds while the console runs: the console gets a handle on it when asked.
	urlC := pgtest.URL(t)
	specs := append(moved.Cells(), cells.CellSpec{Name: "c", ID: 3, URL: urlC, Tenants: []string{"umbrella"}})
	grown, err := cells.New("a", specs)
	if err != nil {
		t.Fatal(err)
	}
	if err := cells.Write(path, grown); err != nil {
		t.Fatal(err)
	}
	if err := set.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if p := cs.Placement(); p["umbrella"] != "c" {
		t.Errorf("placement %v, want umbrella in c", p)
	}
	got = cs.Cells()
	if len(got) != 3 || got[2].Name != "c" || !tenantdb.Scoped(got[2].DB) {
		t.Fatalf("cells after the map grew: %+v, want a, b and a tenant handle on c", got)
	}
	if err := got[2].DB.WithContext(tenantdb.WithTenants(ctx, []string{"*"})).Raw(`SELECT name FROM cell_identity`).Scan(&name).Error; err != nil || name != "c" {
		t.Errorf("cell c's handle reaches the database of cell %q (%v)", name, err)
	}
	if again := cs.Cells(); again[1].DB != got[1].DB || again[2].DB != got[2].DB {
		t.Error("asking again opened new handles")
	}
}

// TestCellsOf_ACellDownAtStart: the console starts while cell b's database resets every
// connection (cells.Open leaves it unavailable). Its pages serve cell a's keys and name cell b as
// they do for a cell that went down later; once b answers and the set has checked it, its keys
// are listed and nothing is named.
func TestCellsOf_ACellDownAtStart(t *testing.T) {
	lateURL, up := pgtest.Late(t, pgtest.URL(t))
	m, err := cells.New("a", []cells.CellSpec{{Name: "a", ID: 1, URL: pgtest.URL(t), Tenants: []string{"acme"}},
		{Name: "b", ID: 2, URL: lateURL, Tenants: []string{"globex"}}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := cells.Open(context.Background(), m, cells.Options{Claim: claim.Config{DigestSecret: testSecret}, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("open with cell b down: %v", err)
	}
	t.Cleanup(set.Close)
	b := setup(t, func(cfg *Config) {
		cs, closeCells, err := CellsOf(set, cfg.DB, nil)
		if err != nil {
			t.Fatalf("the console's cells with cell b down: %v", err)
		}
		t.Cleanup(closeCells)
		cfg.Cells = cs
	})
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	ka := b.seedKey("acme", "payment.charge", "up", `{"amount":100,"currency":"EUR"}`, true)
	for path, banner := range map[string]string{"/": `id="cells-unavailable"`, "/keys": `id="cells-left-out"`} {
		got := root.get(path)
		if got.Status != 200 {
			t.Errorf("%s with cell b down since start: %d %s", path, got.Status, truncate(got.Body, 300))
			continue
		}
		mustContain(t, path+" with cell b down since start", got.Body, banner)
		if i := strings.Index(got.Body, banner); i >= 0 && !strings.Contains(got.Body[i:min(len(got.Body), i+300)], "cell b") {
			t.Errorf("%s: the warning does not name cell b: %s", path, got.Body[i:min(len(got.Body), i+300)])
		}
	}
	mustContain(t, "keys page with cell b down since start", root.get("/keys").Body, fmt.Sprintf("/keys/%d", ka.ID))
	got := root.api("/api/v1/dashboard", tok)
	if d := decode[struct {
		Unavailable []string `json:"cells_unavailable"`
	}](t, got); got.Status != 200 || !slices.Equal(d.Unavailable, []string{"b"}) {
		t.Errorf("dashboard API with cell b down since start: %d %+v", got.Status, d)
	}

	up()
	cb, _ := set.Cell("b")
	select {
	case <-cb.Up():
	case <-time.After(60 * time.Second):
		t.Fatalf("cell b not up a minute after its database answers: %v", cb.Err())
	}
	st, err := set.StoreFor("globex")
	if err != nil {
		t.Fatal(err)
	}
	saved := b.claims
	b.claims = st
	kb := b.seedKey("globex", "payment.charge", "late", `{"amount":100,"currency":"EUR"}`, true)
	b.claims = saved
	keys := root.get("/keys")
	mustContain(t, "keys page once cell b is up", keys.Body, fmt.Sprintf("/keys/%d", ka.ID), fmt.Sprintf("/keys/%d", kb.ID))
	if strings.Contains(keys.Body, `id="cells-left-out"`) || strings.Contains(root.get("/").Body, `id="cells-unavailable"`) {
		t.Error("a page still names cell b once it is up")
	}
}
