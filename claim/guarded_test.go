package claim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
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

type orderStatus string

func TestTransition_ZeroRowsAreReadNotIgnored(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE torders (id text PRIMARY KEY, status text NOT NULL, amount bigint NOT NULL)`)
	pgtest.Exec(t, b.db, `INSERT INTO torders VALUES ('o1', 'pending', 100)`)
	move := func(from, to orderStatus, extra ...any) error {
		tr := claim.Transition[orderStatus]{Table: "torders", ID: "o1", From: from, To: to}
		if len(extra) > 0 {
			tr.Extra, tr.ExtraArgs = "amount = ?", extra
		}
		return tr.Apply(ctx, b.db)
	}
	var gc *claim.GuardConflict
	if err := move("pending", "paid", int64(99)); !errors.As(err, &gc) || !gc.Extra || gc.State != "pending" {
		t.Fatalf("wrong amount: %v, want a conflict on the extra guard with the row still pending", err)
	}
	if err := move("pending", "paid", int64(100)); err != nil {
		t.Fatal(err)
	}
	err := move("pending", "closed")
	if !errors.Is(err, claim.ErrGuardConflict) || !errors.As(err, &gc) || gc.State != "paid" || gc.Extra || gc.Missing {
		t.Fatalf("late close: %v (%+v), want a conflict reading state paid", err, gc)
	}
	err = claim.Transition[orderStatus]{Table: "torders", ID: "nope", From: "pending", To: "paid"}.Apply(ctx, b.db)
	if !errors.As(err, &gc) || !gc.Missing {
		t.Fatalf("unknown id: %v, want a conflict saying the row is missing", err)
	}
	if err := (claim.Transition[orderStatus]{Table: "torders; DROP TABLE torders", ID: "o1", From: "a", To: "b"}).Apply(ctx, b.db); err == nil || errors.Is(err, claim.ErrGuardConflict) {
		t.Fatalf("bad table name: %v, want a configuration error", err)
	}
}

func TestVersionedUpdate_StaleVersionAndOverdraftAreDistinct(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE vaccounts (id text PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL)`)
	pgtest.Exec(t, b.db, `INSERT INTO vaccounts VALUES ('a', 100, 7)`)
	debit := func(version, amount int64) error {
		return claim.VersionedUpdate{Table: "vaccounts", ID: "a", Version: version,
			Set: map[string]any{"balance": gorm.Expr("balance - ?", amount)}, Extra: "balance >= ?", ExtraArgs: []any{amount}}.Apply(ctx, b.db)
	}
	if err := debit(7, 30); err != nil {
		t.Fatal(err)
	}
	var gc *claim.GuardConflict
	if err := debit(7, 30); !errors.As(err, &gc) || gc.Version != 8 || gc.Extra {
		t.Fatalf("stale version: %v, want a conflict reading version 8", err)
	}
	if err := debit(8, 71); !errors.As(err, &gc) || !gc.Extra {
		t.Fatalf("overdraft: %v, want a conflict on the balance guard", err)
	}
	var bal int64
	b.db.Raw(`SELECT balance FROM vaccounts`).Scan(&bal)
	if bal != 70 {
		t.Fatalf("balance %d, want 70", bal)
	}
}

// TestTransition_ARowMovedIntoFromConcurrentlyIsNotAConflict: under READ COMMITTED the UPDATE
// skips a row whose committed state is not yet From, while another transaction is moving it
// there; the locked read after zero rows waits for that transaction and the transition applies.
func TestTransition_ARowMovedIntoFromConcurrentlyIsNotAConflict(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE rorders (id text PRIMARY KEY, status text NOT NULL)`)
	pgtest.Exec(t, b.db, `INSERT INTO rorders VALUES ('o1', 'new')`)
	other := b.db.Begin()
	if err := other.Exec(`UPDATE rorders SET status = 'pending' WHERE id = 'o1'`).Error; err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- b.db.Transaction(func(tx *gorm.DB) error {
			return claim.Transition[orderStatus]{Table: "rorders", ID: "o1", From: "pending", To: "paid"}.Apply(ctx, tx)
		})
	}()
	pgtest.AwaitLockWait(t, b.db, 5*time.Second, "rorders") // the transition skipped the row and waits on its lock
	if err := other.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("transition after the row reached pending: %v", err)
	}
	var status string
	b.db.Raw(`SELECT status FROM rorders`).Scan(&status)
	if status != "paid" {
		t.Fatalf("status %s, want paid", status)
	}
}
