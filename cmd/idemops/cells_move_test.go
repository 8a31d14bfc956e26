package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

// TestCellsMove_MovesATenantAndRewritesTheMap: `idemops cells move` prints a line per step and a
// summary, moves the tenant's keys and rewrites the map; what it cannot do it refuses with exit
// 2 and one line.
func TestCellsMove_MovesATenantAndRewritesTheMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	mapPath := filepath.Join(dir, "cells.yaml")
	if err := os.WriteFile(mapPath, []byte(fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme, initech]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		pgtest.URL(t), pgtest.URL(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	const secret = "cells-test-secret-0123"
	m, err := cells.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	set, err := cells.Open(ctx, m, cells.Options{Claim: claim.Config{DigestSecret: []byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	store, err := set.StoreFor("acme")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		out, err := store.Claim(ctx, claim.Request{Tenant: "acme", Operation: "charge", Key: fmt.Sprint("k", i), Intent: []byte(`{"amount":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Complete(ctx, nil, out.Lease, &claim.Snapshot{Status: 201, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Both cells' dashboard counts folded: after the move each must count its keys again.
	for _, name := range []string{"a", "b"} {
		c, _ := set.Cell(name)
		if err := keys.FoldCounts(ctx, c.DB); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"cells", "move", "--cells", mapPath, "--data-dir", dir, "--digest-secret", secret}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "nobody", "--to", "b"}, `tenant "nobody" is in no cell`},
		{[]string{"--tenant", "acme", "--to", "zz"}, `no cell "zz"`},
		{[]string{"--tenant", "globex", "--to", "b"}, `in cell b already`},
		{[]string{"--tenant", "acme"}, `needs --tenant, and --to or --abort`},
		{[]string{"--tenant", "acme", "--abort"}, `no move of tenant "acme" is under way`},
	} {
		_, err := runIdemops(t, append(base, tc.args...)...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d), want exit 2 saying %q", tc.args, err, exitCode(err), tc.want)
		}
	}
	out, err := runIdemops(t, append(base, "--tenant", "acme", "--to", "b")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"move acme fenced", "move acme copied", ": 3 keys,", "move acme done", "moved tenant acme from a to b: 3 keys, ", "freeze window"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	after, err := cells.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := after.CellOf("acme"); c != "b" {
		t.Fatalf("the map puts acme in %q after the move", c)
	}
	for _, name := range []string{"a", "b"} {
		c, _ := set.Cell(name)
		var refold bool
		if err := c.DB.Raw(`SELECT settled_until = 'epoch' FROM key_count_folds`).Scan(&refold).Error; err != nil {
			t.Fatal(err)
		}
		if !refold {
			t.Errorf("cell %s: the folded key counts were not recounted after the move", name)
		}
	}
}
