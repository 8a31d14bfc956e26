package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// TestKeyPage_PanelsShowTheDeploymentsRowsForTheKey: a KeyPanelFunc gets the key the operator
// opened (its tenant included), a failing panel does not take the page down, and an operator
// of another tenant never reaches the panel.
func TestKeyPage_PanelsShowTheDeploymentsRowsForTheKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	b := newBundle(t, func(c *Config) {
		c.KeyPanels = []KeyPanelFunc{
			func(_ context.Context, k *claim.Key) (*KeyPanel, error) {
				mu.Lock()
				calls = append(calls, k.Tenant)
				mu.Unlock()
				return &KeyPanel{ID: "order", Title: "Order and channel callbacks", Summary: errs.Phrasef("order of %s", k.Tenant),
					Columns: []string{"Event", "Outcome"}, Rows: [][]Cell{{Code("charge.succeeded"), Word("applied")}}}, nil
			},
			func(context.Context, *claim.Key) (*KeyPanel, error) { return nil, errors.New("boom") },
		}
	})
	b.addOperator("v", access.RoleViewer, "acme")
	b.addOperator("g", access.RoleViewer, "globex")
	k := b.seedKey("acme", "payment.charge", "k-panel", `{"amount":100,"currency":"USD"}`, true)
	path := fmt.Sprintf("/keys/%d", k.ID)
	page := b.signIn("v").get(path)
	if page.Status != 200 {
		t.Fatalf("key page: %d", page.Status)
	}
	mustContain(t, "key page", page.Body, `id="panel-order"`, "order of acme", "charge.succeeded", "applied", "Panel unavailable")
	mustNotContain(t, "key page", page.Body, "boom")
	mu.Lock()
	calls = nil
	mu.Unlock()
	got := b.signIn("g").get(path)
	mu.Lock()
	defer mu.Unlock()
	if got.Status != 404 || len(calls) != 0 {
		t.Fatalf("another tenant's operator: %d, panel called for %v", got.Status, calls)
	}
}
