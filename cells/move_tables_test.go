package cells

import (
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// Every table with a tenant column or a key_id column either moves with its tenant or is named
// as staying, with the reason: a new table of tenant rows fails this test until someone decides.
func TestMovedTables_EveryTenantTableIsNamed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var tables []string
	if err := db.Raw(`SELECT DISTINCT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
		  AND a.attname IN ('tenant', 'key_id') AND NOT a.attisdropped ORDER BY 1`).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	moved := map[string]bool{}
	for _, m := range movedTables {
		moved[m.Name] = true
		if _, both := stayingTables[m.Name]; both {
			t.Errorf("%s both moves and stays", m.Name)
		}
	}
	for _, name := range tables {
		if _, stays := stayingTables[name]; !moved[name] && !stays {
			t.Errorf("table %s has tenant rows: add it to movedTables or stayingTables (with the reason)", name)
		}
	}
	if len(tables) < len(movedTables) {
		t.Fatalf("found only %v", tables)
	}
}
