package cells

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/idemops/idemops/internal/inputcheck"
)

// Limits of a map file.
const (
	maxMapBytes = 1 << 20
	maxCellID   = 1000
	// idShift puts cell id n's rows in [n<<40, (n+1)<<40): a trillion ids per cell.
	idShift = 40
)

var cellName = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// CellSpec is one cell as the map file names it.
type CellSpec struct {
	// Name is the cell's name in the map ([a-z0-9-]{1,32}).
	Name string
	// ID is 1..1000, unique in the map: the cell's rows get ids from ID<<40 up.
	ID int
	// URL is the cell's PostgreSQL connection string (several hosts allowed).
	URL string
	// Tenants live in this cell and in no other; sorted.
	Tenants []string
}

// IDFloor is the first id of the cell's range: ID<<40.
func (c CellSpec) IDFloor() int64 { return int64(c.ID) << idShift }

// Map is a validated tenant → cell map.
type Map struct {
	// File is the path the map was read from (Load) or last written to; Refresh re-reads it.
	File    string
	control string
	cells   []CellSpec
	of      map[string]string // tenant → cell name
}

// CellOf names the cell tenant lives in; ok is false when the map puts it in none.
func (m *Map) CellOf(tenant string) (name string, ok bool) {
	name, ok = m.of[tenant]
	return name, ok
}

// Cells are the map's cells in the order the file lists them.
func (m *Map) Cells() []CellSpec {
	out := make([]CellSpec, len(m.cells))
	for i, c := range m.cells {
		c.Tenants = slices.Clone(c.Tenants)
		out[i] = c
	}
	return out
}

// Cell is the cell named name.
func (m *Map) Cell(name string) (CellSpec, bool) {
	for _, c := range m.cells {
		if c.Name == name {
			c.Tenants = slices.Clone(c.Tenants)
			return c, true
		}
	}
	return CellSpec{}, false
}

// Control names the cell whose database holds operators, sessions, audit, channel accounts and
// recon jobs: the map's `control`, or the first cell listed.
func (m *Map) Control() string { return m.control }

// New builds a map from cells (in order) and the control cell's name ("" = the first), with the
// checks Load makes; errors name the field.
func New(control string, cells []CellSpec) (*Map, error) {
	m := &Map{control: control, of: map[string]string{}}
	ids := map[int]string{}
	for i, c := range cells {
		field := "cells." + c.Name
		if err := checkCellName(c.Name); err != nil {
			return nil, &MapError{Field: fmt.Sprintf("cells[%d]", i), Problem: err.Error()}
		}
		if m.has(c.Name) {
			return nil, &MapError{Field: field, Problem: "is listed twice"}
		}
		if c.ID < 1 || c.ID > maxCellID {
			return nil, &MapError{Field: field + ".id", Problem: fmt.Sprintf("must be 1..%d, not %d", maxCellID, c.ID)}
		}
		if other, dup := ids[c.ID]; dup {
			return nil, &MapError{Field: field + ".id", Problem: fmt.Sprintf("id %d is also cell %s's", c.ID, other)}
		}
		ids[c.ID] = c.Name
		if err := checkURL(c.URL); err != nil {
			return nil, &MapError{Field: field + ".url", Problem: err.Error()}
		}
		tenants := slices.Clone(c.Tenants)
		for _, t := range tenants {
			if err := checkTenant(t); err != nil {
				return nil, &MapError{Field: field + ".tenants", Problem: err.Error(), tenant: t}
			}
			if other, dup := m.of[t]; dup {
				if other == c.Name {
					return nil, &MapError{Field: field + ".tenants", Problem: fmt.Sprintf("tenant %q is listed twice", t), tenant: t}
				}
				return nil, &MapError{Field: field + ".tenants", Problem: fmt.Sprintf("tenant %q is in cells %s and %s", t, other, c.Name), tenant: t}
			}
			m.of[t] = c.Name
		}
		slices.Sort(tenants)
		c.Tenants = tenants
		m.cells = append(m.cells, c)
	}
	if len(m.cells) == 0 {
		return nil, &MapError{Field: "cells", Problem: "must list at least one cell"}
	}
	if m.control == "" {
		m.control = m.cells[0].Name
	} else if !m.has(m.control) {
		return nil, &MapError{Field: "control", Problem: fmt.Sprintf("names cell %q, which the map does not list", m.control)}
	}
	return m, nil
}

func (m *Map) has(name string) bool {
	return slices.ContainsFunc(m.cells, func(c CellSpec) bool { return c.Name == name })
}

func checkCellName(name string) error {
	if !cellName.MatchString(name) {
		return fmt.Errorf("cell name %q must be 1-32 of a-z, 0-9 and '-'", name)
	}
	return nil
}

// checkTenant accepts the tenant names the claim path accepts (non-empty, ≤ 128 bytes, no '|'
// or control characters, UTF-8), and not "*": a map names tenants, it has no wildcard.
func checkTenant(t string) error {
	switch {
	case t == "":
		return errors.New("a tenant name is empty")
	case t == "*":
		return errors.New(`"*" is not a tenant: name each tenant (a tenant not in the map has no cell)`)
	case len(t) > 128:
		return fmt.Errorf("tenant %q is longer than 128 bytes", t)
	case !utf8.ValidString(t):
		return fmt.Errorf("tenant %q is not UTF-8", t)
	case strings.ContainsFunc(t, func(r rune) bool { return r == '|' || r < 0x20 || r == 0x7f }):
		return fmt.Errorf("tenant %q must not contain '|' or control characters", t)
	case strings.TrimSpace(t) != t:
		return fmt.Errorf("tenant %q starts or ends with a space", t)
	}
	return nil
}

// checkURL parses a cell's connection string the way the driver will (several hosts allowed),
// without connecting; the message never repeats the string (it may hold a password).
func checkURL(u string) error {
	if strings.TrimSpace(u) == "" {
		return errors.New("is empty: give the cell's PostgreSQL URL")
	}
	if _, err := pgx.ParseConfig(u); err != nil {
		return errors.New("is not a PostgreSQL connection string the driver accepts")
	}
	return nil
}

// Load reads and validates a map file. Any problem is a *MapError naming the file, the line,
// the field or tenant; nothing is half-loaded.
func Load(path string) (*Map, error) {
	data, err := inputcheck.ReadFile(path, maxMapBytes)
	if err != nil {
		return nil, &MapError{File: path, Problem: err.Error()}
	}
	return Parse(path, data)
}

// Parse validates a map file's contents; name is used in errors and becomes Map.File.
func Parse(name string, data []byte) (*Map, error) {
	m, err := parse(data)
	if err != nil {
		var me *MapError
		if errors.As(err, &me) {
			me.File = name
			return nil, me
		}
		return nil, &MapError{File: name, Problem: err.Error()}
	}
	m.File = name
	return m, nil
}

func parse(data []byte) (*Map, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &MapError{Field: "cells", Problem: "must list at least one cell (the file is empty)"}
		}
		return nil, yamlError(err)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &MapError{Line: root.Line, Problem: "must be a mapping with control and cells"}
	}
	var control string
	var cells []CellSpec
	lines := map[string]int{} // field → line, for the refusals New makes
	var cellsNode *yaml.Node
	if k := repeatedKey(root); k != nil {
		return nil, &MapError{Line: k.Line, Field: k.Value, Problem: "is given twice"}
	}
	for k, v := range pairs(root) {
		switch k.Value {
		case "control":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return nil, &MapError{Line: v.Line, Field: "control", Problem: "must name a cell"}
			}
			control, lines["control"] = v.Value, v.Line
		case "cells":
			cellsNode = v
		default:
			return nil, &MapError{Line: k.Line, Field: k.Value, Problem: "unknown field (known: control, cells)"}
		}
	}
	if cellsNode == nil {
		return nil, &MapError{Field: "cells", Problem: "must list at least one cell"}
	}
	if cellsNode.Kind != yaml.MappingNode {
		return nil, &MapError{Line: cellsNode.Line, Field: "cells", Problem: "must be a mapping of cell name to {id, url, tenants}"}
	}
	if k := repeatedKey(cellsNode); k != nil {
		return nil, &MapError{Line: k.Line, Field: "cells." + k.Value, Problem: "is listed twice"}
	}
	for k, v := range pairs(cellsNode) {
		name := k.Value
		field := "cells." + name
		if err := checkCellName(name); err != nil {
			return nil, &MapError{Line: k.Line, Field: "cells", Problem: err.Error()}
		}
		lines[field] = k.Line
		if v.Kind != yaml.MappingNode {
			return nil, &MapError{Line: v.Line, Field: field, Problem: "must be a mapping {id, url, tenants}"}
		}
		if fk := repeatedKey(v); fk != nil {
			return nil, &MapError{Line: fk.Line, Field: field + "." + fk.Value, Problem: "is given twice"}
		}
		c := CellSpec{Name: name}
		var hasID bool
		for fk, fv := range pairs(v) {
			f := field + "." + fk.Value
			lines[f] = fv.Line
			switch fk.Value {
			case "id":
				n, err := strconv.Atoi(fv.Value)
				if fv.Kind != yaml.ScalarNode || err != nil {
					return nil, &MapError{Line: fv.Line, Field: f, Problem: fmt.Sprintf("must be a number 1..%d", maxCellID)}
				}
				c.ID, hasID = n, true
			case "url":
				if fv.Kind != yaml.ScalarNode {
					return nil, &MapError{Line: fv.Line, Field: f, Problem: "must be a PostgreSQL URL"}
				}
				c.URL = fv.Value
			case "tenants":
				if fv.Kind != yaml.SequenceNode {
					return nil, &MapError{Line: fv.Line, Field: f, Problem: "must be a list of tenant names"}
				}
				for _, t := range fv.Content {
					if t.Kind != yaml.ScalarNode {
						return nil, &MapError{Line: t.Line, Field: f, Problem: "must be a list of tenant names"}
					}
					c.Tenants = append(c.Tenants, t.Value)
					lines[f+" "+t.Value] = t.Line // the last listing: the one a duplicate is refused at
				}
			default:
				return nil, &MapError{Line: fk.Line, Field: f, Problem: "unknown field (known: id, url, tenants)"}
			}
		}
		if !hasID {
			return nil, &MapError{Line: k.Line, Field: field + ".id", Problem: fmt.Sprintf("is missing: give the cell a number 1..%d, unique in the map", maxCellID)}
		}
		if c.URL == "" {
			return nil, &MapError{Line: k.Line, Field: field + ".url", Problem: "is missing: give the cell's PostgreSQL URL"}
		}
		cells = append(cells, c)
	}
	m, err := New(control, cells)
	if err != nil {
		var me *MapError
		if errors.As(err, &me) && me.Line == 0 {
			me.Line = lineOf(lines, me)
		}
		return nil, err
	}
	return m, nil
}

// yamlError is the decoder's refusal as "file:line: problem".
func yamlError(err error) *MapError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, problem, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return &MapError{Line: line, Problem: problem}
			}
		}
	}
	return &MapError{Problem: msg}
}

// lineOf finds the line a refusal of New is about: the tenant's (last) listing, else the field's.
func lineOf(lines map[string]int, e *MapError) int {
	if n, ok := lines[e.Field+" "+e.tenant]; ok && e.tenant != "" {
		return n
	}
	return lines[e.Field]
}

// pairs walks a mapping node's keys and values in file order.
func pairs(n *yaml.Node) func(yield func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !yield(n.Content[i], n.Content[i+1]) {
				return
			}
		}
	}
}

// repeatedKey is the first key a mapping node lists twice (YAML forbids it; a node does not check).
func repeatedKey(n *yaml.Node) *yaml.Node {
	seen := map[string]bool{}
	for k := range pairs(n) {
		if seen[k.Value] {
			return k
		}
		seen[k.Value] = true
	}
	return nil
}

// Marshal is the map as a file: control first, then one line per cell in the map's order.
func (m *Map) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "control: %s\ncells:\n", m.control)
	for _, c := range m.cells {
		tenants := make([]string, len(c.Tenants))
		for i, t := range c.Tenants {
			tenants[i] = strconv.Quote(t)
		}
		fmt.Fprintf(&b, "  %s: {id: %d, url: %s, tenants: [%s]}\n", c.Name, c.ID, strconv.Quote(c.URL), strings.Join(tenants, ", "))
	}
	return b.Bytes()
}

// Write replaces the map file at path with m, atomically: a reader sees the old map or the new
// one, never half of either (a temporary file in the same folder, synced, renamed over path, the
// folder synced). The file is re-read before the rename, so what lands always loads.
func Write(path string, m *Map) error {
	data := m.Marshal()
	if _, err := Parse(path, data); err != nil {
		return fmt.Errorf("write cell map: %w", err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write cell map: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removes the leftover on failure
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if _, err := tmp.Write(data); err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write cell map %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	m.File = path
	return nil
}

// WithTenantIn is a copy of m with tenant in cell to (and in no other): the switch of a move.
func (m *Map) WithTenantIn(tenant, to string) (*Map, error) {
	if !m.has(to) {
		return nil, &MapError{Field: "cells", Problem: fmt.Sprintf("no cell %q in the map", to)}
	}
	cells := m.Cells()
	for i := range cells {
		cells[i].Tenants = slices.DeleteFunc(cells[i].Tenants, func(t string) bool { return t == tenant })
		if cells[i].Name == to {
			cells[i].Tenants = append(cells[i].Tenants, tenant)
		}
	}
	out, err := New(m.control, cells)
	if err != nil {
		return nil, err
	}
	out.File = m.File
	return out, nil
}
