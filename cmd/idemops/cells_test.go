package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/ports"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestCells_ABadMapStopsTheStartWithExit2: serve and daemon refuse a map that puts a tenant in
// two cells, or that is missing, with one line naming the file and the tenant — before any
// database is opened (the cells' URLs lead nowhere).
func TestCells_ABadMapStopsTheStartWithExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "cells.yaml")
	nowhere := "postgres://idemops@127.0.0.1:1/none?connect_timeout=1"
	if err := os.WriteFile(bad, []byte(fmt.Sprintf("cells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [acme]}\n", nowhere, nowhere)), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--cells", bad}, bad + `:3: cells.b.tenants: tenant "acme" is in cells a and b`},
		{[]string{"daemon", "--cells", bad}, bad + `:3: cells.b.tenants: tenant "acme" is in cells a and b`},
		{[]string{"daemon", "--cells", missing}, missing + ": no such file or directory"},
		{[]string{"daemon", "--cells", bad, "--database-url", nowhere}, "--cells and --database-url both name databases"},
	} {
		wantBadInput(t, tc.want, append(tc.args, "--data-dir", filepath.Join(dir, "data"))...)
	}
}

// twoCellMap writes dir/cells.yaml: two cells on two fresh test databases, acme in a (the control
// cell), globex in b. It returns the cells' URLs and the map's path.
func twoCellMap(t *testing.T, dir string) (urls map[string]string, mapPath string) {
	t.Helper()
	urls = map[string]string{"a": pgtest.URL(t), "b": pgtest.URL(t)}
	mapPath = filepath.Join(dir, "cells.yaml")
	if err := os.WriteFile(mapPath, []byte(fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		urls["a"], urls["b"])), 0o644); err != nil {
		t.Fatal(err)
	}
	return urls, mapPath
}

// TestDaemon_OneReplicaPerCellEachLeadingItsOwnCell: `idemops daemon --cells` runs a replica per
// cell, each elected in its own cell's database with its own schedules, and every daemon metric
// carries the cell.
func TestDaemon_OneReplicaPerCellEachLeadingItsOwnCell(t *testing.T) {
	t.Parallel()
	dir := dataDirWithSecret(t, []byte("cells-test-secret-0123"))
	urls, mapPath := twoCellMap(t, dir)
	addr, err := ports.Addr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runIdemopsCtx(ctx, "daemon", "--cells", mapPath, "--data-dir", dir, "--metrics-addr", addr, "--replica", "r1")
		done <- err
	}()
	dbs := map[string]*gorm.DB{}
	for name, url := range urls {
		db := pgtest.Open(t, url)
		dbs[name] = db
		pgtest.Await(t, db, 60*time.Second, "cell "+name+"'s replica leading", func() bool {
			var n int64
			db.Raw(`SELECT count(*) FROM daemon_replicas WHERE is_leader AND name = 'r1'`).Scan(&n)
			return n == 1
		}, "daemon_replicas")
	}
	for name, db := range dbs {
		var schedules, leaders int64
		db.Raw(`SELECT count(*) FROM schedules`).Scan(&schedules)
		db.Raw(`SELECT count(*) FROM daemon_leader`).Scan(&leaders)
		if schedules == 0 || leaders != 1 {
			t.Errorf("cell %s: %d schedules, %d leader leases; want its own of each", name, schedules, leaders)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`idemops_daemon_is_leader{cell="a"} 1`, `idemops_daemon_is_leader{cell="b"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(body), "\nidemops_daemon_is_leader ") {
		t.Error("a daemon metric without its cell")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("daemon stopped with %v", err)
	}
}

// TestServe_WithCellsRunsTheConsoleOnTheControlCellAndAReplicaPerCell: `idemops serve --cells`
// starts (the daemons' metrics, labelled by cell, share the console's registry), elects a replica
// in each cell, and stops cleanly.
func TestServe_WithCellsRunsTheConsoleOnTheControlCellAndAReplicaPerCell(t *testing.T) {
	t.Parallel()
	dir := dataDirWithSecret(t, []byte("cells-test-secret-0123"))
	urls, mapPath := twoCellMap(t, dir)
	addr, err := ports.Addr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := runIdemopsCtx(ctx, "serve", "--cells", mapPath, "--data-dir", dir, "--addr", addr, "--replica", "s1")
		done <- err
	}()
	for name, url := range urls {
		db := pgtest.Open(t, url)
		leading := func() bool {
			var n int64
			db.Raw(`SELECT count(*) FROM daemon_replicas WHERE is_leader AND name = 's1'`).Scan(&n)
			return n == 1
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped before cell %s had a leader: %v", name, err)
		default:
		}
		pgtest.Await(t, db, 60*time.Second, "cell "+name+"'s replica leading", leading, "daemon_replicas")
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	if err != nil {
		t.Errorf("console not answering on %s: %v", addr, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve stopped with %v", err)
	}
}

func runIdemopsCtx(ctx context.Context, args ...string) (string, error) {
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := execute(ctx, root)
	return out.String(), err
}

// TestCells_ACellDownAtStartJoinsWhenItAnswers: `idemops serve --cells` and `idemops daemon
// --cells` start while cell b's database resets every connection: cell a's replica leads at once,
// the process keeps running, and once b answers the set checks it and b's replica leads there.
func TestCells_ACellDownAtStartJoinsWhenItAnswers(t *testing.T) {
	t.Parallel()
	for _, command := range []string{"serve", "daemon"} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			dir := dataDirWithSecret(t, []byte("cells-test-secret-0123"))
			urlA, urlB := pgtest.URL(t), pgtest.URL(t)
			lateB, up := pgtest.Late(t, urlB)
			mapPath := filepath.Join(dir, "cells.yaml")
			if err := os.WriteFile(mapPath, []byte(fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
				urlA, lateB)), 0o644); err != nil {
				t.Fatal(err)
			}
			addr, err := ports.Addr()
			if err != nil {
				t.Fatal(err)
			}
			args := []string{command, "--cells", mapPath, "--data-dir", dir, "--replica", "r1"}
			if command == "serve" {
				args = append(args, "--addr", addr)
			} else {
				args = append(args, "--metrics-addr", addr)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := runIdemopsCtx(ctx, args...)
				done <- err
			}()
			leads := func(name string, db *gorm.DB) {
				t.Helper()
				pgtest.Await(t, db, 60*time.Second, "cell "+name+"'s replica leading", func() bool {
					select {
					case err := <-done:
						t.Fatalf("%s stopped with cell b down: %v", command, err)
					default:
					}
					var n int64
					db.Raw(`SELECT count(*) FROM daemon_replicas WHERE is_leader AND name = 'r1'`).Scan(&n)
					return n == 1
				}, "daemon_replicas")
			}
			leads("a", pgtest.Open(t, urlA))
			dbB := pgtest.Open(t, urlB)
			var n int64
			if err := dbB.Raw(`SELECT count(*) FROM cell_identity`).Scan(&n).Error; err != nil || n != 0 {
				t.Fatalf("cell b's database was written while it could not be reached: %d identities, %v", n, err)
			}
			if command == "daemon" { // its metrics name the cell that is down
				resp, err := http.Get("http://" + addr + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, want := range []string{`idemops_store_up{cell="a"} 1`, `idemops_store_up{cell="b"} 0`} {
					if !strings.Contains(string(body), want) {
						t.Errorf("metrics with cell b down lack %s", want)
					}
				}
			}
			up()
			leads("b", dbB)
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s stopped with %v", command, err)
			}
		})
	}
}
