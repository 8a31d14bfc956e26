package main

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/replay"
)

// TestCellDaemons_RegisterEachMetricOnceInTheConsolesRegistry: with a console in the process
// (serve, demo), every cell's replica is built on the console's registry — its own metrics
// labelled by cell — and its bulk replays run on the console's replay workflow in its cell,
// counted in the console's one replay counter (registered once, by the console, unlabelled), not
// registered again under the cell's label (which the registry refuses: the same name with other
// labels).
func TestCellDaemons_RegisterEachMetricOnceInTheConsolesRegistry(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	_, mapPath := twoCellMap(t, dir)
	set, _ := openTestCells(t, mapPath, secret)
	control := set.Control()
	// What console.New does: its workflow on the control cell, its collectors in its registry.
	reg := prometheus.NewRegistry()
	w, err := replay.New(replay.Config{DB: control.DB, Claims: control.Store, Audit: audit.New(control.DB, secret), Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg.MustRegister(w.Collectors()...)
	deps := daemonDeps{DB: control.DB, Store: control.Store, Replays: w, Registerer: reg, Logger: slog.Default()}
	for _, c := range set.Cells() {
		cd := cellDeps(deps, set, c)
		if _, err := newDaemon(cd, daemonOptions{Daemon: daemon.Config{Name: "t"}}); err != nil {
			t.Errorf("cell %s's replica on the console's registry: %v", c.Name, err)
		}
		if cd.Replays == nil || len(cd.Replays.Collectors()) != 0 {
			t.Errorf("cell %s's bulk replays: not on the console's workflow (its counter registered again)", c.Name)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "idemops_daemon_is_leader"); err != nil || n != len(set.Cells()) {
		t.Errorf("idemops_daemon_is_leader: %d series (%v), want one per cell", n, err)
	}
}
