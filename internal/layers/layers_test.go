// Package layers holds the test of the module's dependency rule: imports point one way, from
// the binaries down to the claim logic and the leaves. docs/ARCHITECTURE.md draws the same
// order; a change to it changes both.
package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/idemops/idemops/"

// order is the module's packages from the bottom up, in groups: a package may import packages of
// lower groups and of its own group, never of a higher one. A path ending in "/..." is the
// folder and everything under it.
var order = [][]string{
	{"errs"},
	{"money", "chanproto"},
	{"internal/cronspec", "internal/inputcheck", "internal/telemetry", "internal/pgpool", "internal/ports", "internal/sysuser", "migrations", "proto"},
	{"internal/tenantdb", "internal/pglocal", "internal/mqlocal", "internal/pgha"},
	{"internal/testinfra/..."},
	{"claim"},
	{"claim/consume", "claim/grpcidem", "claim/httpidem", "claim/idemclient", "claim/claimtest"},
	{"cells"},
	{"keys"},
	{"downstream/..."},
	{"daemon/..."},
	{"audit"},
	{"reconcile"},
	{"retention"},
	{"replay"},
	{"access"},
	{"templates"},
	{"console"},
	{"demo"},
	{"chaos/...", "costcurve"},
	{"cmd/..."},
}

// leafOnly: claim is imported by services, so it brings nothing of this module but these.
var leafOnly = map[string][]string{"claim": {"errs", "money"}}

func group(pkg string) int {
	for i, g := range order {
		for _, p := range g {
			if p == pkg || strings.HasSuffix(p, "/...") && (pkg == strings.TrimSuffix(p, "/...") || strings.HasPrefix(pkg, strings.TrimSuffix(p, "..."))) {
				return i
			}
		}
	}
	return -1
}

// imports reads the module imports of every Go file under the module root, by package folder;
// tests are kept apart (a test may reach higher, to the rigs that run it).
func imports(t *testing.T) (code, tests map[string][]string) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	code, tests = map[string][]string{}, map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		into := code
		if strings.HasSuffix(path, "_test.go") {
			into = tests
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if after, ok := strings.CutPrefix(p, module); ok && after != filepath.ToSlash(rel) {
				into[filepath.ToSlash(rel)] = append(into[filepath.ToSlash(rel)], after)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return code, tests
}

// TestLayers_ImportsRunDownward: no package imports one of a higher group.
func TestLayers_ImportsRunDownward(t *testing.T) {
	code, _ := imports(t)
	if len(code) < 20 {
		t.Fatalf("read only %d packages; the walk is broken", len(code))
	}
	for pkg, ims := range code {
		g := group(pkg)
		if g < 0 {
			t.Errorf("%s is in no group of the order: place it (and in docs/ARCHITECTURE.md)", pkg)
			continue
		}
		for _, im := range ims {
			switch gi := group(im); {
			case gi < 0:
				t.Errorf("%s imports %s, which is in no group of the order: place it (and in docs/ARCHITECTURE.md)", pkg, im)
			case gi > g:
				t.Errorf("%s imports %s, which stands above it", pkg, im)
			}
		}
	}
}

// TestLayers_ClaimImportsOnlyTheLeaves: a service importing claim gets no HTTP server, cron or
// template with it.
func TestLayers_ClaimImportsOnlyTheLeaves(t *testing.T) {
	code, _ := imports(t)
	for pkg, allowed := range leafOnly {
		for _, im := range code[pkg] {
			if !slices.Contains(allowed, im) {
				t.Errorf("%s imports %s; it may import only %v of this module", pkg, im, allowed)
			}
		}
	}
}

// TestLayers_NothingBelowTheConsoleImportsIt, tests included: stores and rules live below the
// web layer, and a test of a lower package does not need the console to run; nothing under
// internal/ — helpers, servers, rigs and their tests — needs the console or the demo.
func TestLayers_NothingBelowTheConsoleImportsIt(t *testing.T) {
	code, tests := imports(t)
	console := group("console")
	for _, m := range []map[string][]string{code, tests} {
		for pkg, ims := range m {
			if group(pkg) < console && slices.Contains(ims, "console") {
				t.Errorf("%s imports console", pkg)
			}
		}
	}
	for _, m := range []map[string][]string{code, tests} {
		for pkg, ims := range m {
			if strings.HasPrefix(pkg, "internal/") && (slices.Contains(ims, "console") || slices.Contains(ims, "demo")) {
				t.Errorf("%s (under internal/) imports the console or the demo", pkg)
			}
		}
	}
}

// TestLayers_OnlyTestsImportTheTestRigs: internal/testinfra holds what tests use (and the rigs
// that stand above it: claim/claimtest, daemon/daemontest); the binary (and everything it links)
// opens its pool with internal/pgpool and starts its private servers with internal/pglocal,
// mqlocal and pgha, so no rig is built into it.
func TestLayers_OnlyTestsImportTheTestRigs(t *testing.T) {
	rig := func(pkg string) bool {
		return strings.HasPrefix(pkg, "internal/testinfra/") || pkg == "claim/claimtest" || pkg == "daemon/daemontest"
	}
	code, _ := imports(t)
	for pkg, ims := range code {
		if rig(pkg) {
			continue
		}
		for _, im := range ims {
			if rig(im) {
				t.Errorf("%s (not a test) imports the test rig %s", pkg, im)
			}
		}
	}
}
