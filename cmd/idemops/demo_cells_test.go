package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestDemoCells_ABadCountExits2NamingTheFlag: --cells takes 1 or 2, and 2 makes its own
// clusters, so a database URL beside it is refused too — each one line naming --cells, exit 2,
// before anything starts.
func TestDemoCells_ABadCountExits2NamingTheFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--cells", "0"},
		{"--cells", "3"},
		{"--cells", "two"},
		{"--cells", ""},
		{"--cells", "2", "--database-url", "postgres://idemops@127.0.0.1:1/none?connect_timeout=1"},
	} {
		_, err := runIdemops(t, append([]string{"demo", "--data-dir", dir}, args...)...)
		if err == nil || exitCode(err) != 2 || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--cells") {
			t.Errorf("demo %v: %v (exit %d); want exit 2, one line naming --cells", args, err, exitCode(err))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused demo left %d entries in the data dir", len(entries))
	}
}

// TestDemoCells_EachTenantsClaimLandsInItsCellAndTheConsoleListsBoth runs `idemops demo --cells 2`
// as a person does (two private clusters under the data dir, no traffic): the READY line names
// both cells and the map, which puts acme in cell a (the control cell) and globex in cell b; a
// payment of each tenant is claimed in its own cell's database and not the other's; each cell
// has its own daemon leader; and the console, with a token made by the CLI on the control cell,
// lists both keys.
func TestDemoCells_EachTenantsClaimLandsInItsCellAndTheConsoleListsBoth(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // --cells 2 starts its own clusters; AMQP_URL, if set, is used
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the servers run as their system user
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, stop := runDemo(t, "--cells", "2", "--data-dir", dir, "--console-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0",
		"--paysim-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--traffic=false")
	defer stop()

	m, err := cells.Load(r.CellsFile)
	if err != nil {
		t.Fatalf("the READY line's map %q: %v", r.CellsFile, err)
	}
	home := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		home[tenant], _ = m.CellOf(tenant)
	}
	if home["acme"] != "a" || home["globex"] != "b" || m.Control() != "a" || !r.Cells["a"].Control ||
		r.DatabaseURL != r.Cells["a"].DatabaseURL || r.Cells["a"].DatabaseURL == r.Cells["b"].DatabaseURL {
		t.Fatalf("cells %+v, map %s: want acme in a (the control cell, DATABASE_URL's), globex in b, on two databases", r.Cells, m.Marshal())
	}
	dbs := map[string]*gorm.DB{}
	for name, c := range r.Cells {
		dbs[name] = pgtest.Open(t, c.DatabaseURL)
	}

	for tenant := range home {
		req, _ := http.NewRequest("POST", r.APIURL+"/v1/payments", strings.NewReader(`{"amount_minor":1234,"currency":"CNY","merchant_order_no":"cells-1","payee":"alice"}`))
		req.Header.Set("Authorization", "Bearer "+r.APIKeys[tenant])
		req.Header.Set("Idempotency-Key", "cells-key-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("%s pays: %d", tenant, resp.StatusCode)
		}
	}
	for tenant, cell := range home {
		for name, db := range dbs {
			var n int64
			if err := db.Raw(`SELECT count(*) FROM idempotency_keys WHERE tenant = ? AND key = 'cells-key-1' AND state = 'completed'`, tenant).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if want := int64(map[bool]int{true: 1}[name == cell]); n != want {
				t.Errorf("cell %s holds %d of %s's key (its cell: %s), want %d", name, n, tenant, cell, want)
			}
		}
	}
	for name, db := range dbs {
		pgtest.Await(t, db, 60*time.Second, "cell "+name+"'s daemon leader", func() bool {
			var n int64
			db.Raw(`SELECT count(*) FROM daemon_leader`).Scan(&n)
			return n == 1
		}, "daemon_leader")
	}

	// The console, on the control cell, lists both cells' keys to the demo's admin.
	out, err := runIdemops(t, "user", "token", r.OperatorUser, "--label", "cells-test", "--database-url", r.DatabaseURL, "--data-dir", dir)
	if err != nil {
		t.Fatalf("user token on the control cell: %v", err)
	}
	req, _ := http.NewRequest("GET", r.ConsoleURL+"/api/v1/keys", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(out))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Keys []struct {
			Tenant string `json:"tenant"`
			Key    string `json:"key"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/v1/keys: %d %v", resp.StatusCode, err)
	}
	listed := map[string]bool{}
	for _, k := range page.Keys {
		if k.Key == "cells-key-1" {
			listed[k.Tenant] = true
		}
	}
	if !listed["acme"] || !listed["globex"] {
		t.Errorf("the console lists %+v; want cells-key-1 of acme (cell a) and of globex (cell b)", page.Keys)
	}
}

// runDemo runs `idemops demo args…` in this process until the test ends (stop, or cleanup, ends
// it and waits, failing the test if it did not stop cleanly within a minute) and returns its
// READY line.
func runDemo(t *testing.T, args ...string) (demoReady, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	root := newRoot()
	root.SetOut(pw)
	var stderr strings.Builder
	root.SetErr(&stderr)
	root.SetArgs(append([]string{"demo"}, args...))
	done := make(chan error, 1)
	go func() {
		err := execute(ctx, root)
		pw.Close()
		done <- err
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- rest
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demo stopped with %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("demo still running a minute after it was stopped")
		}
	}
	t.Cleanup(stop)
	var r demoReady
	select {
	case line := <-ready:
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("READY %s: %v", line, err)
		}
	case err := <-done:
		stopped = true
		t.Fatalf("demo exited before READY: %v\n%s", err, stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("no READY from the demo within 3 minutes")
	}
	return r, stop
}

// TestDemoCellMap_TenantsStayWhereTheLastRunsMapPutThem: each run's map takes the new clusters'
// URLs, and keeps a tenant a move put elsewhere; a map that is missing, unreadable, of other
// cells or leaving a demo tenant out gives the plan's placement (acme in a, globex in b).
func TestDemoCellMap_TenantsStayWhereTheLastRunsMapPutThem(t *testing.T) {
	t.Parallel()
	clusters := []*pglocal.Cluster{{Port: 15001}, {Port: 15002}}
	plan := map[string][]string{"a": {"acme"}, "b": {"globex"}}
	moved := map[string][]string{"a": {"acme", "globex"}, "b": nil}
	for _, tc := range []struct {
		name, last string
		want       map[string][]string
	}{
		{"no map yet", "", plan},
		{"globex moved to a", "cells:\n  a: {id: 1, url: \"postgres://h:1/x\", tenants: [acme, globex]}\n  b: {id: 2, url: \"postgres://h:2/x\", tenants: []}\n", moved},
		{"not a map", "cells: [", plan},
		{"other cells", "cells:\n  a: {id: 1, url: \"postgres://h:1/x\", tenants: [acme, globex]}\n  c: {id: 2, url: \"postgres://h:2/x\", tenants: []}\n", plan},
		{"globex in no cell", "cells:\n  a: {id: 1, url: \"postgres://h:1/x\", tenants: [acme]}\n  b: {id: 2, url: \"postgres://h:2/x\", tenants: []}\n", plan},
	} {
		path := filepath.Join(t.TempDir(), "cells.yaml")
		if tc.last != "" {
			if err := os.WriteFile(path, []byte(tc.last), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, err := demoCellMap(path, clusters)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, c := range m.Cells() {
			if c.URL != clusters[i].URL("postgres") || !slices.Equal(c.Tenants, tc.want[c.Name]) || m.Control() != "a" {
				t.Errorf("%s: cell %s at %s holds %v (control %s); want %s holding %v, control a", tc.name, c.Name, c.URL, c.Tenants, m.Control(),
					clusters[i].URL("postgres"), tc.want[c.Name])
			}
		}
	}
}
