package retention_test

import (
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

// TestPurge_RestampsKeysWhoseIdsPassInt4: in a tenant cell every id is at least cell id << 40
// (package cells), so the stamp phase's cursor must carry a bigint key id; it failed the purge
// of every cell as soon as a policy was set ("unable to encode … into int4").
func TestPurge_RestampsKeysWhoseIdsPassInt4(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `SELECT setval('idempotency_keys_id_seq', 2::bigint << 40)`)
	if err := retention.SavePolicy(b.ctx, b.db, retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: 3 * day, KeepKey: 10 * day}, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	old := b.key("payment.charge", "c31", claim.StateCompleted)
	kept := b.key("payment.charge", "c1", claim.StateCompleted)
	if old < 2<<40 {
		t.Fatalf("key id %d is not past int4", old)
	}
	b.age(old, 31*day)
	rep := b.purge(retention.Options{})
	if b.exists(old) || !b.exists(kept) || rep.Restamped == 0 {
		t.Errorf("purge: old key kept %v, new key kept %v, restamped %d; want the old one deleted under the policy", b.exists(old), b.exists(kept), rep.Restamped)
	}
}
