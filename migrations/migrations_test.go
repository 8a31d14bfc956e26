package migrations_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// upTo applies the migrations up to and including version on db.
func upTo(t *testing.T, db *gorm.DB, version int64) {
	t.Helper()
	sqlDB, _ := db.DB()
	p, err := migrations.Provider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatalf("migrate up to %d: %v", version, err)
	}
}

// up applies every pending migration and returns the error.
func up(db *gorm.DB) error {
	sqlDB, _ := db.DB()
	return migrations.Up(context.Background(), sqlDB)
}

// Operator names that differ only in case stop the migration that makes names unique ignoring
// case, with a report naming each group and what to do; once they are renamed it applies, and
// afterwards such a name cannot be added (issue 35 item 7).
func TestMigration00115_RefusesOperatorNamesThatDifferOnlyInCase(t *testing.T) {
	t.Parallel()
	db := pgtest.Empty(t)
	upTo(t, db, 114)
	pgtest.Exec(t, db, `INSERT INTO operators (name, password_hash, role) VALUES
		('Boss@corp.example', 'x', 'admin'), ('boss@corp.example', 'x', 'viewer'), ('ann', 'x', 'viewer'),
		('BOB', 'x', 'operator'), ('bob', 'x', 'viewer'), ('Bob', 'x', 'viewer')`)
	err := up(db)
	if err == nil {
		t.Fatal("the migration applied over names that differ only in case")
	}
	for _, want := range []string{"Boss@corp.example (id 1, admin) and boss@corp.example (id 2, viewer)",
		"BOB (id 4, operator) and bob (id 5, viewer) and Bob (id 6, viewer)", "UPDATE operators SET name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "ann") {
		t.Errorf("the report names an operator without a twin: %v", err)
	}
	pgtest.Exec(t, db, `UPDATE operators SET name = name || '-' || id WHERE id IN (2, 5, 6)`)
	if err := up(db); err != nil {
		t.Fatalf("after the renames: %v", err)
	}
	if err := db.Exec(`INSERT INTO operators (name, password_hash, role) VALUES ('ANN', 'x', 'viewer')`).Error; err == nil ||
		!strings.Contains(err.Error(), "operators_name_lower_key") {
		t.Fatalf("a name differing only in case was added: %v", err)
	}
}

// oldSeal seals an audit row the way the code before migration 00116 did (HMAC-SHA-256 under a
// key derived from the digest secret, over the alg name and the row's fields with the single
// tenant column): pinned here so rows written then are proven to stay verifiable.
func oldSeal(secret []byte, seq int64, at time.Time, actor, action, target, tenant, ip, detail, prev string) string {
	k := hmac.New(sha256.New, secret)
	k.Write([]byte("idemops audit chain v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write([]byte("hmac-sha256\n"))
	fields, _ := json.Marshal([]any{seq, at.UnixMicro(), actor, action, target, tenant, ip, detail, prev})
	m.Write(fields)
	return hex.EncodeToString(m.Sum(nil))
}

// Migration 00116 fills in the tenants of the audit rows written before it from what each names
// (the key's tenant, the channel account's tenants, the operator's, the actor's for a sign-in;
// "*" when nothing is left to tell), and the chain still verifies: the old rows' seals are
// untouched, and Verify says their tenants are outside them (issue 35 item 3).
func TestMigration00116_BackFillsAuditTenantsAndTheChainStillVerifies(t *testing.T) {
	t.Parallel()
	db := pgtest.Empty(t)
	upTo(t, db, 115)
	secret := []byte("migration-test-digest-secret-0123")
	pgtest.Exec(t, db, `INSERT INTO operators (name, password_hash, role) VALUES ('gina', 'x', 'viewer'), ('root', 'x', 'admin')`)
	pgtest.Exec(t, db, `INSERT INTO operator_tenants (operator_id, tenant) VALUES (1, 'globex'), (2, '*')`)
	pgtest.Exec(t, db, `INSERT INTO channel_accounts (channel, tenants, updated_by) VALUES ('wechat-gi', '{globex,initech}', 't')`)
	pgtest.Exec(t, db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version, request, state, downstream_key)
		VALUES ('acme', 'payment.charge', 'k1', 'd1', 'f1', 1, '{}', 'completed', 'dk1')`)
	rows := []struct{ actor, action, target, tenant, detail, want string }{
		{"operator:root", "key.reveal", "key:1", "acme", `{}`, "{acme}"},
		{"operator:root", "key.reveal", "key:999", "globex", `{}`, "{globex}"}, // gone: its tenant then
		{"operator:root", "operator.add", "operator:gina", "", `{}`, "{globex}"},
		{"operator:gina", "login", "", "", `{}`, "{globex}"},
		{"operator:root", "token.create", "operator:gina", "", `{}`, "{globex}"},
		{"anonymous", "login.refused", "operator:gina", "", `{}`, "{globex}"},
		{"operator:root", "reconcile.channel.set_tenants", "channel:wechat-gi", "*", `{"tenants":["globex","initech"],"before":["*"]}`, "{*}"},
		{"operator:root", "reconcile.channel.credential.set", "channel:wechat-gi/api_key", "*", `{}`, "{globex,initech}"},
		{"operator:root", "retention.floor.set", "floor", "", `{}`, "{*}"},
		{"anonymous", "login.refused", "operator:nobody", "", `{}`, "{*}"},
	}
	prev := strings.Repeat("0", 64)
	at := time.Now().UTC().Truncate(time.Microsecond)
	for i, r := range rows {
		seq := int64(i + 1)
		hash := oldSeal(secret, seq, at, r.actor, r.action, r.target, r.tenant, "10.0.0.1", r.detail, prev)
		pgtest.Exec(t, db, `INSERT INTO audit_log (seq, at, actor, action, target, tenant, ip, detail, prev_hash, hash, alg)
			VALUES (?, ?, ?, ?, ?, ?, '10.0.0.1', ?, ?, ?, 'hmac-sha256')`, seq, at, r.actor, r.action, r.target, r.tenant, r.detail, prev, hash)
		prev = hash
	}
	if err := up(db); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var got string
		if err := db.Raw(`SELECT tenants::text FROM audit_log WHERE seq = ?`, i+1).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if got != r.want {
			t.Errorf("row %d (%s %s): tenants %s, want %s", i+1, r.action, r.target, got, r.want)
		}
	}
	log := audit.New(db, secret)
	if err := log.Append(context.Background(), nil, audit.Entry{Actor: "operator:root", Action: "key.reveal", Target: "key:1", Tenants: []string{"acme"}}); err != nil {
		t.Fatal(err)
	}
	res, err := log.Verify(context.Background(), audit.VerifyOptions{})
	if err != nil || !res.OK() || res.Rows != int64(len(rows)+1) || res.UnsealedTenants != int64(len(rows)) {
		t.Fatalf("verify after the back-fill: %+v %v", res, err)
	}
}
