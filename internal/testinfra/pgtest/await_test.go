package pgtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/migrations"
)

func TestMain(m *testing.M) { Main(m) }

// Await's notify triggers go in while the console's start-up grants on every table
// (migrations.EnsureTenantRole): a table's first trigger and a GRANT both rewrite the table's
// pg_class row, and without a common lock one of them failed with "tuple concurrently updated"
// (a few runs in a hundred). Each round races the two on a fresh table.
func TestAwait_InstallsItsTriggersBesideTheConsolesGrants(t *testing.T) {
	db := New(t)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 100 {
		table := fmt.Sprintf("race_%d", i)
		Exec(t, db, "CREATE TABLE "+table+" (id int)")
		var wg sync.WaitGroup
		var grantErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			grantErr = migrations.EnsureTenantRole(ctx, sqlDB)
		}()
		listen(t, ctx, db, []string{table}).Close(context.Background())
		wg.Wait()
		if grantErr != nil {
			t.Fatalf("round %d: the grants beside the triggers: %v", i, grantErr)
		}
	}
}
