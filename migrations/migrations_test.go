package migrations_test

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

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
