package cells

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemops/idemops/errs"
)

const twoCells = `control: b
cells:
  a: {id: 1, url: "postgres://h1:5432,h2:5432/idemops?target_session_attrs=read-write", tenants: [acme, initech]}
  b:
    id: 2
    url: postgres://h3,h4/idemops
    tenants: [globex]
`

func TestParse_ReadsCellsInFileOrder(t *testing.T) {
	m, err := Parse("cells.yaml", []byte(twoCells))
	if err != nil {
		t.Fatal(err)
	}
	if m.Control() != "b" || m.File != "cells.yaml" {
		t.Errorf("control %q file %q, want b, cells.yaml", m.Control(), m.File)
	}
	cs := m.Cells()
	if len(cs) != 2 || cs[0].Name != "a" || cs[1].Name != "b" || cs[0].ID != 1 || cs[1].ID != 2 {
		t.Fatalf("cells %+v", cs)
	}
	if !slices.Equal(cs[0].Tenants, []string{"acme", "initech"}) || cs[1].URL != "postgres://h3,h4/idemops" {
		t.Errorf("cells %+v", cs)
	}
	for tenant, want := range map[string]string{"acme": "a", "initech": "a", "globex": "b"} {
		if got, ok := m.CellOf(tenant); !ok || got != want {
			t.Errorf("CellOf(%q) = %q, %v; want %q", tenant, got, ok, want)
		}
	}
	if got, ok := m.CellOf("hooli"); ok {
		t.Errorf("CellOf(hooli) = %q; a tenant not in the map has no cell", got)
	}
	if cs[0].IDFloor() != 1<<40 {
		t.Errorf("IDFloor %d", cs[0].IDFloor())
	}
}

func TestParse_ControlDefaultsToTheFirstCellListed(t *testing.T) {
	m, err := Parse("c.yaml", []byte("cells:\n  zz: {id: 9, url: postgres://x/db, tenants: []}\n  aa: {id: 1, url: postgres://y/db, tenants: [t]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Control() != "zz" {
		t.Errorf("control %q, want zz (first listed)", m.Control())
	}
}

// TestParse_RefusesWithOneLineNamingWhatIsWrong: every refusal of a map file is one line naming
// the file, the line and the field or tenant, and is bad input (the CLI exits 2).
func TestParse_RefusesWithOneLineNamingWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"empty file", "", "m.yaml: cells: must list at least one cell (the file is empty)"},
		{"no cells field", "control: a\n", "m.yaml: cells: must list at least one cell"},
		{"no cells listed", "cells: {}\n", "m.yaml: cells: must list at least one cell"},
		{"not a mapping", "- a\n", "m.yaml:1: must be a mapping with control and cells"},
		{"bad yaml", "cells: [\n", "m.yaml:1: did not find expected node content"},
		{"unknown top field", "cell:\n  a: {id: 1}\n", "m.yaml:1: cell: unknown field (known: control, cells)"},
		{"control twice", "control: a\ncontrol: a\ncells:\n  a: {id: 1, url: postgres://x/d}\n", "m.yaml:2: control: is given twice"},
		{"cells not a mapping", "cells: [a]\n", "m.yaml:1: cells: must be a mapping of cell name to {id, url, tenants}"},
		{"cell not a mapping", "cells:\n  a: 1\n", "m.yaml:2: cells.a: must be a mapping {id, url, tenants}"},
		{"cell listed twice", "cells:\n  a: {id: 1, url: postgres://x/d}\n  a: {id: 2, url: postgres://y/d}\n", "m.yaml:3: cells.a: is listed twice"},
		{"bad cell name", "cells:\n  A_1: {id: 1, url: postgres://x/d}\n", `m.yaml:2: cells: cell name "A_1" must be 1-32 of a-z, 0-9 and '-'`},
		{"long cell name", "cells:\n  " + strings.Repeat("a", 33) + ": {id: 1, url: postgres://x/d}\n", "must be 1-32 of a-z"},
		{"unknown cell field", "cells:\n  a: {id: 1, url: postgres://x/d, tenant: [x]}\n", "m.yaml:2: cells.a.tenant: unknown field (known: id, url, tenants)"},
		{"cell field twice", "cells:\n  a:\n    id: 1\n    id: 2\n    url: postgres://x/d\n", "m.yaml:4: cells.a.id: is given twice"},
		{"no id", "cells:\n  a: {url: postgres://x/d}\n", "m.yaml:2: cells.a.id: is missing: give the cell a number 1..1000, unique in the map"},
		{"id not a number", "cells:\n  a: {id: one, url: postgres://x/d}\n", "m.yaml:2: cells.a.id: must be a number 1..1000"},
		{"id zero", "cells:\n  a: {id: 0, url: postgres://x/d}\n", "m.yaml:2: cells.a.id: must be 1..1000, not 0"},
		{"id too big", "cells:\n  a:\n    id: 1001\n    url: postgres://x/d\n", "m.yaml:3: cells.a.id: must be 1..1000, not 1001"},
		{"id twice", "cells:\n  a: {id: 1, url: postgres://x/d}\n  b:\n    id: 1\n    url: postgres://y/d\n", "m.yaml:4: cells.b.id: id 1 is also cell a's"},
		{"no url", "cells:\n  a: {id: 1}\n", "m.yaml:2: cells.a.url: is missing: give the cell's PostgreSQL URL"},
		{"url not a string", "cells:\n  a: {id: 1, url: [x]}\n", "m.yaml:2: cells.a.url: must be a PostgreSQL URL"},
		{"url does not parse", "cells:\n  a: {id: 1, url: \"postgres://u:secret@h:notaport/d\"}\n", "m.yaml:2: cells.a.url: is not a PostgreSQL connection string the driver accepts"},
		{"tenants not a list", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: acme}\n", "m.yaml:2: cells.a.tenants: must be a list of tenant names"},
		{"tenant not a name", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [[acme]]}\n", "m.yaml:2: cells.a.tenants: must be a list of tenant names"},
		{"tenant in two cells", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [acme, initech]}\n  b:\n    id: 2\n    url: postgres://y/d\n    tenants:\n      - globex\n      - acme\n", `m.yaml:8: cells.b.tenants: tenant "acme" is in cells a and b`},
		{"tenant twice in a cell", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [acme, acme]}\n", `m.yaml:2: cells.a.tenants: tenant "acme" is listed twice`},
		{"wildcard tenant", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [\"*\"]}\n", `m.yaml:2: cells.a.tenants: "*" is not a tenant: name each tenant (a tenant not in the map has no cell)`},
		{"empty tenant", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [\"\"]}\n", "m.yaml:2: cells.a.tenants: a tenant name is empty"},
		{"tenant with a pipe", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [\"a|b\"]}\n", `m.yaml:2: cells.a.tenants: tenant "a|b" must not contain '|' or control characters`},
		{"tenant with a newline", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [\"a\\nb\"]}\n", `tenant "a\nb" must not contain '|' or control characters`},
		{"tenant with spaces", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [\" acme\"]}\n", `m.yaml:2: cells.a.tenants: tenant " acme" starts or ends with a space`},
		{"long tenant", "cells:\n  a: {id: 1, url: postgres://x/d, tenants: [" + strings.Repeat("t", 129) + "]}\n", "is longer than 128 bytes"},
		{"control names no cell", "control: c\ncells:\n  a: {id: 1, url: postgres://x/d}\n", `m.yaml:1: control: names cell "c", which the map does not list`},
		{"control empty", "control: \"\"\ncells:\n  a: {id: 1, url: postgres://x/d}\n", "m.yaml:1: control: must name a cell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse("m.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("accepted: %+v", m.Cells())
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "\n") && !strings.Contains(tc.want, `\n`) {
				t.Errorf("error %q is more than one line", msg)
			}
			if !strings.HasPrefix(msg, "m.yaml") {
				t.Errorf("error %q does not name the file", msg)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("error %q repeats the URL's password", msg)
			}
			if !errors.Is(err, ErrInvalidMap) || errs.Exit(err) != 2 {
				t.Errorf("error %q: is ErrInvalidMap %v, exit %d; want bad input, exit 2", msg, errors.Is(err, ErrInvalidMap), errs.Exit(err))
			}
		})
	}
}

func TestLoad_NamesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path+": no such file") || errs.Exit(err) != 2 {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestWrite_RoundTripsAndReplacesAtomically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cells.yaml")
	if err := os.WriteFile(path, []byte(twoCells), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := m.WithTenantIn("acme", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(path, moved); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := got.CellOf("acme"); c != "b" {
		t.Errorf("acme in %q after the switch, want b", c)
	}
	if c, _ := got.CellOf("initech"); c != "a" || got.Control() != "b" {
		t.Errorf("initech in %q, control %q", c, got.Control())
	}
	if !slices.EqualFunc(got.Cells(), moved.Cells(), func(x, y CellSpec) bool {
		return x.Name == y.Name && x.ID == y.ID && x.URL == y.URL && slices.Equal(x.Tenants, y.Tenants)
	}) {
		t.Errorf("read back %+v, wrote %+v", got.Cells(), moved.Cells())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after write: %v %v (want the file's own 0600 kept)", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries after the write, want only the map (no temporary left)", len(entries))
	}
	// m is untouched: the switch is a new map.
	if c, _ := m.CellOf("acme"); c != "a" {
		t.Errorf("the original map changed: acme in %q", c)
	}
}

func TestWithTenantIn_RefusesAnUnknownCell(t *testing.T) {
	m, err := Parse("m.yaml", []byte(twoCells))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WithTenantIn("acme", "c"); err == nil || !strings.Contains(err.Error(), `no cell "c"`) {
		t.Errorf("WithTenantIn(c) = %v", err)
	}
}
