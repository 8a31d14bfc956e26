package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// A refusal is a count until its minute is over: SealRefusals leaves the current minute's
// counts alone and turns each earlier one into one chained row with its count, the first
// target, the last when it differs, and the refusing operator's tenants.
func TestRefusals_CountedPerMinuteThenSealedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i, target := range []string{"key:1", "key:2", "key:3"} {
		e := Entry{Actor: "operator:vic", IP: "10.0.0.9", Action: "GET /keys/:id_refused", Target: target, Tenants: []string{"acme"},
			Detail: map[string]any{"reason": "not found or outside your tenants"}}
		if err := b.log.Refused(ctx, e); err != nil {
			t.Fatalf("refusal %d: %v", i, err)
		}
	}
	if n, err := b.log.SealRefusals(ctx); err != nil || n != 0 {
		t.Fatalf("sealed %d (%v) while the minute runs, want 0", n, err)
	}
	pgtest.Exec(t, b.db, `UPDATE audit_refusals SET minute = minute - interval '1 minute'`)
	if n, err := b.log.SealRefusals(ctx); err != nil || n != 1 {
		t.Fatalf("sealed %d (%v), want 1", n, err)
	}
	if n, err := b.log.SealRefusals(ctx); err != nil || n != 0 {
		t.Fatalf("sealed again: %d (%v)", n, err)
	}
	rows, _, err := b.log.List(ctx, Filter{Scope: []string{"acme"}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %+v %v", rows, err)
	}
	r := rows[0]
	if r.Target != "key:1" || r.IP != "10.0.0.9" || strings.Join(r.Tenants, ",") != "acme" ||
		!strings.Contains(r.Detail, `"count":3`) || !strings.Contains(r.Detail, `"last_target":"key:3"`) {
		t.Errorf("sealed row %+v", r)
	}
	if res := b.verify(VerifyOptions{}); !res.OK() {
		t.Errorf("verify: %+v", res)
	}
}
