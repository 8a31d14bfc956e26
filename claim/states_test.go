package claim_test

import (
	"strings"
	"testing"

	"github.com/idemops/idemops/claim"
)

// States is the table's own list: every state it names passes the keys table's CHECK, and the
// CHECK names no state States leaves out.
func TestStates_AreTheKeysTablesStates(t *testing.T) {
	b := setup(t)
	var def string
	if err := b.db.Raw(`SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'idempotency_keys'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%(state = ANY%'`).Scan(&def).Error; err != nil {
		t.Fatal(err)
	}
	quoted := strings.Count(def, "'")
	if quoted/2 != len(claim.States()) {
		t.Fatalf("CHECK %s names %d states, claim.States has %d", def, quoted/2, len(claim.States()))
	}
	for _, s := range claim.States() {
		if !strings.Contains(def, "'"+string(s)+"'") {
			t.Errorf("state %q is not in the table's CHECK %s", s, def)
		}
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []claim.State{"", "Completed", "failed", "processing "} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}
