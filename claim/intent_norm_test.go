package claim_test

import (
	"testing"

	"github.com/idemops/idemops/claim"
)

// TestFingerprint_DeclaredFieldsAreNormalisedLikeTheStoredRequest: the key stores the currency
// upper-cased, so "cny" and then "CNY" under one key are one intent — a replay, not 422
// key-reused; so are " alice " and "alice", and 100.0 and 1e2 and 100.
func TestFingerprint_DeclaredFieldsAreNormalisedLikeTheStoredRequest(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	first, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-case",
		Intent: []byte(`{"amount_minor": 100, "currency": "cny", "payee": " alice "}`)})
	if err != nil || first.Kind != claim.Completed {
		t.Fatalf("first: %+v %v", first, err)
	}
	for _, body := range []string{
		`{"amount_minor": 100, "currency": "CNY", "payee": "alice"}`,
		`{"amount_minor": 100.0, "currency": "Cny", "payee": "alice"}`,
		`{"amount_minor": 1e2, "currency": "cny", "payee": "alice "}`,
	} {
		out, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-case", Intent: []byte(body)})
		if err != nil || out.Kind != claim.Replay {
			t.Errorf("%s: %+v %v; want the first answer replayed", body, out, err)
		}
	}
	if n := op.executes.Load(); n != 1 {
		t.Fatalf("executed %d times; want 1", n)
	}
}
