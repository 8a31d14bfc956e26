package cells

import (
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// Every table a move copies is fenced — a row trigger calling one of the fence functions — or
// named in fencedThroughKeys with the reason its writes are judged by the keys' fence: a write
// of a moving tenant's row that nothing refuses after the copy is lost with the source's rows.
func TestMovedTables_EveryMovedTableIsFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var fenced []string
	if err := db.Raw(`SELECT DISTINCT c.relname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
		JOIN pg_proc p ON p.oid = tg.tgfoid
		WHERE NOT tg.tgisinternal AND p.proname IN ('cell_fence_check', 'cell_fence_tenant_row', 'cell_fence_key_row')`).Scan(&fenced).Error; err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, name := range fenced {
		has[name] = true
	}
	for _, m := range movedTables {
		_, through := fencedThroughKeys[m.Name]
		switch {
		case has[m.Name] && through:
			t.Errorf("%s is fenced and named in fencedThroughKeys", m.Name)
		case !has[m.Name] && !through:
			t.Errorf("moved table %s has no fence: add a fence trigger (a migration) or name it in fencedThroughKeys with the reason", m.Name)
		}
	}
	if len(fenced) < len(movedTables)-len(fencedThroughKeys) {
		t.Fatalf("fenced tables: only %v", fenced)
	}
}
