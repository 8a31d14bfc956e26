package console

import (
	"context"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/templates"
)

// KeyPanel is a section a deployment adds to the key page, built from its own domain tables
// (the demo: the order a payment opened and every callback that moved it). Title and Columns
// are English texts the console translates (each needs a catalog entry); Summary is a phrase
// (its data arguments are shown as data); each cell says what it holds.
type KeyPanel struct {
	// ID names the section (its HTML id is panel-ID).
	ID, Title string
	Summary   errs.Phrase
	Columns   []string
	Rows      [][]Cell
}

// Cell is one value of a panel's row: make it with Data, Word, Code or At.
type Cell struct{ c templates.PanelCell }

// Data is a value shown as it is (an id, a name).
func Data(s string) Cell { return Cell{templates.PanelCell{Kind: templates.CellData, Text: s}} }

// Word is a word the console translates (a status, an outcome): it needs a catalog entry.
func Word(s string) Cell { return Cell{templates.PanelCell{Kind: templates.CellWord, Text: s}} }

// Code is a code shown as code (an event type).
func Code(s string) Cell { return Cell{templates.PanelCell{Kind: templates.CellCode, Text: s}} }

// At is a moment, written in the operator's zone like every time of the console.
func At(t time.Time) Cell { return Cell{templates.PanelCell{Kind: templates.CellTime, At: t}} }

// String is the cell's value as text (a moment in RFC 3339), for tests and logs.
func (c Cell) String() string {
	if c.c.Kind == templates.CellTime {
		return c.c.At.UTC().Format(time.RFC3339Nano)
	}
	return c.c.Text
}

// Translated says whether the console looks the cell up in its catalog (a Word), and whether
// the catalog has it.
func (c Cell) Translated() (word, inCatalog bool) {
	return c.c.Kind == templates.CellWord, templates.HasMessage(c.c.Text)
}

// KeyPanelFunc builds a panel for k, a key the operator may see: the page loaded it with the
// operator's tenant scope, and the function must select only rows of k.Tenant. A nil panel
// shows nothing. With tenant cells, k's domain rows live in k's cell: KeyCell(ctx) is its
// database.
type KeyPanelFunc func(ctx context.Context, k *claim.Key) (*KeyPanel, error)

type keyCellKey struct{}

// withKeyCell is ctx carrying the cell of the key a panel is built for.
func withKeyCell(ctx context.Context, c *cell) context.Context {
	return context.WithValue(ctx, keyCellKey{}, TenantCell{Name: c.name, DB: c.db})
}

// KeyCell is the cell holding the key a KeyPanelFunc is called for: its name ("" with one
// database) and the console's handle on its database (tenantdb, under the operator's tenants),
// where the panel reads the key's domain rows. ok is false outside a panel.
func KeyCell(ctx context.Context) (c TenantCell, ok bool) {
	c, ok = ctx.Value(keyCellKey{}).(TenantCell)
	return c, ok
}

// keyPanels runs the configured panels; one that fails shows its error in place, never the
// page's.
func (s *Server) keyPanels(ctx context.Context, k *claim.Key) []templates.KeyPanel {
	var out []templates.KeyPanel
	for _, f := range s.cfg.KeyPanels {
		p, err := f(ctx, k)
		if err != nil {
			s.cfg.Logger.Error("key panel", "key_id", k.ID, "err", err)
			out = append(out, templates.KeyPanel{ID: "error", Title: "Panel unavailable", Error: "this panel could not be loaded"})
			continue
		}
		if p != nil {
			tp := templates.KeyPanel{ID: p.ID, Title: p.Title, Summary: p.Summary, Columns: p.Columns}
			for _, r := range p.Rows {
				row := make([]templates.PanelCell, len(r))
				for i, c := range r {
					row[i] = c.c
				}
				tp.Rows = append(tp.Rows, row)
			}
			out = append(out, tp)
		}
	}
	return out
}
