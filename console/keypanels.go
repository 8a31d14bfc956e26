package console

import (
	"context"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/templates"
)

// KeyPanel is a section a deployment adds to the key page, built from its own domain tables
// (the demo: the order a payment opened and every callback that moved it).
type KeyPanel struct {
	// ID names the section (its HTML id is panel-ID).
	ID, Title, Summary string
	Columns            []string
	Rows               [][]string
}

// KeyPanelFunc builds a panel for k, a key the operator may see: the page loaded it with the
// operator's tenant scope, and the function must select only rows of k.Tenant. A nil panel
// shows nothing.
type KeyPanelFunc func(ctx context.Context, k *claim.Key) (*KeyPanel, error)

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
			out = append(out, templates.KeyPanel{ID: p.ID, Title: p.Title, Summary: p.Summary, Columns: p.Columns, Rows: p.Rows})
		}
	}
	return out
}
