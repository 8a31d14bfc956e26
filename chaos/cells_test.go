package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/chaos/report"
)

// Without --cells the world has one PostgreSQL holding every tenant and no cell names (the
// schedule is the one-cell one); with two cells the tenants are dealt acme → a, globex → b, and
// the map the parts read puts each tenant in exactly its cell, a the control cell.
func TestCells_SplitTheTenantsAndWriteAMapTheCellsPackageReads(t *testing.T) {
	tenants := []string{"acme", "globex"}
	for _, n := range []int{0, 1} {
		w := &world{pgs: newCells(n, tenants)}
		if w.withCells() || len(w.pgs) != 1 || w.cellNames() != nil || !w.pgs[0].holds("acme") || !w.pgs[0].holds("anyone") || w.pgs[0].label() != "" {
			t.Errorf("--cells %d: %+v", n, w.pgs)
		}
	}
	w := &world{pgs: newCells(2, tenants)}
	if !w.withCells() || !slices.Equal(w.cellNames(), []string{"a", "b"}) {
		t.Fatalf("cells %v", w.cellNames())
	}
	if w.cellOf("acme").name != "a" || w.cellOf("globex").name != "b" || w.cellOf("globex").holds("acme") || w.cellNamed("b") != w.pgs[1] || w.cellNamed("c") != nil {
		t.Errorf("placement: acme in %s, globex in %s", w.cellOf("acme").name, w.cellOf("globex").name)
	}
	if got := w.cellsText(); got != "a: acme; b: globex" {
		t.Errorf("cellsText %q", got)
	}
	m, err := w.cellMap(func(c *cell) string {
		return "postgres://h-" + c.name + ":5432,h2-" + c.name + ":5432/idemops?target_session_attrs=read-write"
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cells.yaml")
	if err := cells.Write(path, m); err != nil {
		t.Fatal(err)
	}
	back, err := cells.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Control() != "a" {
		t.Errorf("control %q", back.Control())
	}
	for _, tc := range []struct{ tenant, cell string }{{"acme", "a"}, {"globex", "b"}} {
		if c, ok := back.CellOf(tc.tenant); !ok || c != tc.cell {
			t.Errorf("%s in %q (%v), want %s", tc.tenant, c, ok, tc.cell)
		}
	}
	if _, ok := back.CellOf("initech"); ok {
		t.Error("a tenant the run has not is in a cell")
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "h-b:5432,h2-b:5432") {
		t.Errorf("cell b's url not in the map:\n%s", b)
	}
}

// The summary line names the cells only in a run with cells.
func TestSummary_NamesTheCells(t *testing.T) {
	r := &report.Report{Seed: 22, Duration: "1m0s", Passed: true, Invariants: []report.Invariant{{Name: "x", OK: true}}}
	if s := Summary(r, "out"); !strings.HasPrefix(s, "chaos PASS: seed 22, 1m0s: ") {
		t.Errorf("without cells: %s", s)
	}
	r.Cells = []report.Cell{{Name: "a"}, {Name: "b"}}
	if s := Summary(r, "out"); !strings.HasPrefix(s, "chaos PASS: seed 22, 1m0s, 2 cells: ") {
		t.Errorf("with cells: %s", s)
	}
}
