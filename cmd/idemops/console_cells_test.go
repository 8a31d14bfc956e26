package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestConsole_CellsListsEveryCellsKeys: with --cells the console (as `idemops console` and
// `serve` start it: consoleCells) reads operators from the control cell and keys from every cell:
// an operator of every tenant lists acme's key (cell a) and globex's (cell b) in one search,
// newest first, and opens each by id.
func TestConsole_CellsListsEveryCellsKeys(t *testing.T) {
	t.Parallel()
	if newConsoleCmd().Flag("cells") == nil || newServeCmd().Flag("cells") == nil {
		t.Fatal("console and serve take no --cells")
	}
	urls, mapPath := twoCellMap(t, t.TempDir())
	m, err := cells.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("cells-test-secret-0123")
	ctx := context.Background()
	dbs := map[string]*gorm.DB{}
	for name, url := range urls {
		db := pgtest.Open(t, url)
		dbs[name] = db
	}

	// The console command's start-up on the control cell's database: its handle, then the cells.
	d := &database{DB: dbs["a"], URL: urls["a"], cellMap: m}
	cdb, err := d.ConsoleDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := console.Config{DB: cdb, DigestSecret: secret}
	closeCells, err := consoleCells(ctx, d, claim.Config{DigestSecret: secret}, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closeCells()
		d.cells.Close()
		if sqlDB, err := cdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	if ccfg.Cells == nil {
		t.Fatal("consoleCells gave the console no cells")
	}
	srv, err := console.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	seed := func(cell, tenant, key string) int64 {
		t.Helper()
		st, err := claim.NewStore(dbs[cell], claim.Config{DigestSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		out, err := st.Claim(ctx, claim.Request{Tenant: tenant, Operation: "payment.charge", Key: key,
			Intent: json.RawMessage(`{"amount":1}`), Actor: "service:test"})
		if err != nil || out.Kind != claim.Acquired {
			t.Fatalf("seed %s in %s: %v %v", key, cell, out, err)
		}
		return out.KeyID
	}
	idA := seed("a", "acme", "k-acme")
	idB := seed("b", "globex", "k-globex")
	if idB < 2<<40 {
		t.Fatalf("cell b's key id %d is not in its range", idB)
	}
	ops := access.NewOperators(dbs["a"], access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(dbs["a"], secret))
	if _, err := ops.Add(ctx, access.Change{Actor: "operator:test"}, access.NewOperator{Name: "root",
		Password: "a long password 123", Role: access.RoleViewer, Tenants: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	tok, err := ops.CreateToken(ctx, access.Change{Actor: "operator:test"}, "root", "cli", 0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	status, body := get("/api/v1/keys")
	var page struct {
		Keys []struct {
			ID int64 `json:"id"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &page); status != 200 || err != nil {
		t.Fatalf("GET /api/v1/keys: %d %s", status, body)
	}
	var ids []int64
	for _, k := range page.Keys {
		ids = append(ids, k.ID)
	}
	if !slices.Equal(ids, []int64{idB, idA}) {
		t.Errorf("keys %v, want globex's %d (newer) then acme's %d", ids, idB, idA)
	}
	for _, id := range []int64{idA, idB} {
		if status, body := get(fmt.Sprintf("/api/v1/keys/%d", id)); status != 200 {
			t.Errorf("GET key %d: %d %s", id, status, body)
		}
	}
}
