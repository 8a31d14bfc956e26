package claim_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pgtest"
)

func TestGuardedUpdate_StateTransitionOnlyFromItsPrecondition(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE gorders (id text PRIMARY KEY, status text NOT NULL)`)
	pgtest.Exec(t, b.db, `INSERT INTO gorders VALUES ('o1', 'pending')`)
	pay := claim.GuardedUpdate{Table: "gorders", Guards: map[string]any{"id": "o1", "status": "pending"},
		Set: map[string]any{"status": "paid"}}
	if err := pay.Apply(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if err := pay.Apply(ctx, b.db); !errors.Is(err, claim.ErrGuardConflict) {
		t.Fatalf("second pending→paid: %v, want ErrGuardConflict", err)
	}
	closeIt := claim.GuardedUpdate{Table: "gorders", Guards: map[string]any{"id": "o1", "status": "pending"},
		Set: map[string]any{"status": "closed"}}
	if err := closeIt.Apply(ctx, b.db); !errors.Is(err, claim.ErrGuardConflict) {
		t.Fatalf("late close after paid: %v, want ErrGuardConflict", err)
	}
	var status string
	b.db.Raw(`SELECT status FROM gorders WHERE id = 'o1'`).Scan(&status)
	if status != "paid" {
		t.Fatalf("status %q, want paid", status)
	}
}

func TestGuardedUpdate_VersionAndBalanceGuards(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE gaccounts (id text PRIMARY KEY, balance bigint NOT NULL, version int NOT NULL)`)
	pgtest.Exec(t, b.db, `INSERT INTO gaccounts VALUES ('a', 100, 1)`)
	debit := func(version int, amount int64) error {
		return claim.GuardedUpdate{Table: "gaccounts", Guards: map[string]any{"id": "a", "version": version},
			Set: map[string]any{"balance": gorm.Expr("balance - ?", amount)}, Bump: "version",
			Extra: "balance >= ?", ExtraArgs: []any{amount}}.Apply(ctx, b.db)
	}
	if err := debit(1, 60); err != nil {
		t.Fatal(err)
	}
	if err := debit(1, 10); !errors.Is(err, claim.ErrGuardConflict) {
		t.Fatalf("stale version: %v, want ErrGuardConflict", err)
	}
	if err := debit(2, 50); !errors.Is(err, claim.ErrGuardConflict) {
		t.Fatalf("overdraft: %v, want ErrGuardConflict", err)
	}
	var bal, ver int64
	b.db.Raw(`SELECT balance FROM gaccounts`).Scan(&bal)
	b.db.Raw(`SELECT version FROM gaccounts`).Scan(&ver)
	if bal != 40 || ver != 2 {
		t.Fatalf("balance %d version %d, want 40 and 2", bal, ver)
	}
}
