package failover_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The proof's CPU groups. On one machine both cells, the client and everything else running
// there share the CPUs; in production a cell is its own machines. So the proof runs in a CPU
// cgroup of its own, weighted far above other work on the machine, and inside it the client (this
// test process) and each cell have a group. Groups share by weight only when the CPU is short,
// and an idle group's share goes to the others: nothing is pinned or capped. So cell a's failover
// can take no more CPU from cell b than a separate machine would, while whatever cell a's failure
// does through what the cells really share — this process, its router, its pools and goroutines
// — still lands on cell b's claims.
//
// The weights: under the kernel's autogroup scheduling every session on the machine is a group of
// weight 1024, and PostgreSQL puts each of its processes in a session of its own, so a helper's
// test with 50 busy backends weighs 50×1024; at 32×1024 the proof's client still waited 40-140 ms
// for the CPU a few times a minute at load 12-18, at 256×1024 (the largest weight is 256×1024)
// no longer. The client weighs 8 cells: it serves both, and a client stalled for the CPU stalls
// every tenant's claims at once (with equal weights it did, and cell b's idle p99 rose to 15-19 ms).
const (
	cpuProofShares  = 256 * 1024
	cpuPartShares   = 1024
	cpuClientShares = 8 * 1024
)

// cpuRoot is the cgroup v1 cpu hierarchy (a variable: the test of the unisolated path points it
// at a folder that does not exist).
var cpuRoot = "/sys/fs/cgroup/cpu"

// cpuHomePath is the cpu cgroup this process started in, relative to the hierarchy: "/" in CI, or
// a group a caller runs its work in (a session's priority group on a shared machine). Read once,
// before the proof moves the process: the proof's groups are made inside it, so the caller's
// group still holds (and weighs, and can stop or resume) everything the proof runs, and what is
// left in them goes back to it.
var cpuHomePath = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3) // id:controllers:path
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "cpu") {
			return f[2]
		}
	}
	return "/"
})

// cpuHome is the folder of cpuHomePath in the hierarchy.
func cpuHome() string { return filepath.Join(cpuRoot, cpuHomePath()) }

// cpuGroups is the proof's group and its parts, by name ("client", and each cell's).
type cpuGroups struct {
	dir   string
	parts map[string]string
}

// isolateCPU creates the proof's group with a part per name and "client", and moves this
// process into the client part (processes it starts later start there too). It needs a writable
// cgroup v1 cpu hierarchy (root); without one (not root, cgroup v2 only, most containers) it
// returns nil and why, changes nothing, and the proof runs and asserts as it is, unisolated. The
// groups go when the test ends, failed or not; a run killed before its cleanups leaves them, and
// the next run removes them first (removeStaleGroups).
func isolateCPU(t *testing.T, names ...string) (*cpuGroups, string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cpuRoot, "cpu.shares")); err != nil {
		return nil, "not isolated: no cgroup v1 cpu hierarchy"
	}
	removeStaleGroups()
	g := &cpuGroups{dir: filepath.Join(cpuHome(), fmt.Sprintf("idemops-cells-%d", os.Getpid())), parts: map[string]string{}}
	if err := g.mkdir(g.dir, cpuProofShares); err != nil {
		return nil, "not isolated: " + err.Error()
	}
	for _, name := range append([]string{"client"}, names...) {
		g.parts[name] = filepath.Join(g.dir, name)
		shares := cpuPartShares
		if name == "client" {
			shares = cpuClientShares
		}
		if err := g.mkdir(g.parts[name], shares); err != nil {
			g.remove()
			return nil, "not isolated: " + err.Error()
		}
	}
	if err := moveProcs(g.parts["client"], os.Getpid()); err != nil {
		g.remove()
		return nil, "not isolated: " + err.Error()
	}
	t.Cleanup(func() {
		if err := g.remove(); err != nil {
			t.Logf("cpu groups: %v", err)
		}
	})
	return g, fmt.Sprintf("own cpu cgroup (%d shares; client %d, each cell %d)", cpuProofShares, cpuClientShares, cpuPartShares)
}

func (g *cpuGroups) mkdir(dir string, shares int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(shares)), 0o644)
}

// adopt moves into cell's part every process whose command line names a path under dir (the
// cell's pg_auto_failover set: its keepers and postmasters), and everything they started.
// What they start afterwards starts there.
func (g *cpuGroups) adopt(cell, dir string) error {
	if g == nil {
		return nil
	}
	parent, cmd := processTable()
	var pids []int
	for pid, c := range cmd {
		if strings.Contains(c, dir+"/") {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return fmt.Errorf("cell %s: no process runs under %s", cell, dir)
	}
	in := map[int]bool{}
	for _, pid := range pids {
		in[pid] = true
	}
	for changed := true; changed; { // their descendants
		changed = false
		for pid, pp := range parent {
			if !in[pid] && in[pp] {
				in[pid], changed = true, true
			}
		}
	}
	for pid := range in {
		if err := moveProcs(g.parts[cell], pid); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cell %s: %w", cell, err)
		}
	}
	return nil
}

// remove moves whatever still runs in the groups (a killed run's servers, say) back to the group
// the proof was made in and removes the groups: none is left with the proof's weight.
func (g *cpuGroups) remove() error {
	var errs []error
	for _, dir := range append(slices.Collect(maps.Values(g.parts)), g.dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				_ = moveProcs(cpuHome(), pid)
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeStaleGroups removes the groups of proofs whose test process is gone (a run ended by its
// timeout does not run its cleanups); a group something still runs in stays.
func removeStaleGroups() {
	dirs, _ := filepath.Glob(filepath.Join(cpuHome(), "idemops-cells-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "idemops-cells-"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			continue
		}
		g := &cpuGroups{dir: dir, parts: map[string]string{}}
		parts, _ := filepath.Glob(filepath.Join(dir, "*", "cpu.shares"))
		for _, p := range parts {
			g.parts[filepath.Base(filepath.Dir(p))] = filepath.Dir(p)
		}
		_ = g.remove()
	}
}

// moveProcs moves process pid, all its threads, into the group at dir.
func moveProcs(dir string, pid int) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	if errors.Is(err, syscallESRCH) {
		return os.ErrNotExist // gone meanwhile
	}
	return err
}

// processTable reads every process's parent and command line from /proc.
func processTable() (parent map[int]int, cmd map[int]string) {
	parent, cmd = map[int]int{}, map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		c, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmd[pid] = strings.ReplaceAll(string(c), "\x00", " ")
	}
	return parent, cmd
}

var syscallESRCH = syscall.ESRCH

// Without a cgroup v1 cpu hierarchy the proof runs unisolated: isolateCPU says why and changes
// nothing, adopt does nothing.
func TestCellsCPU_WithoutAHierarchyTheProofRunsUnisolated(t *testing.T) {
	before, _ := os.ReadFile("/proc/self/cgroup")
	old := cpuRoot
	cpuRoot = filepath.Join(t.TempDir(), "no-such-hierarchy")
	t.Cleanup(func() { cpuRoot = old })
	g, how := isolateCPU(t, "a", "b")
	if g != nil || !strings.HasPrefix(how, "not isolated: ") {
		t.Fatalf("isolateCPU without a hierarchy: %v, %q; want nil and why", g, how)
	}
	if err := g.adopt("a", t.TempDir()); err != nil {
		t.Fatalf("adopt without groups: %v", err)
	}
	if after, _ := os.ReadFile("/proc/self/cgroup"); string(after) != string(before) {
		t.Fatalf("the process moved: %s → %s", before, after)
	}
}

// A run killed before its cleanups leaves its groups, maybe with its servers still in them; the
// next run moves those processes back to the group the proof runs in and removes the groups.
// Where there is no writable hierarchy there is nothing to sweep, and the test says so and checks
// that.
func TestCellsCPU_AKilledRunsGroupsAreSweptByTheNext(t *testing.T) {
	gone := exec.Command("true")
	need(t, gone.Run())
	dir := filepath.Join(cpuHome(), fmt.Sprintf("idemops-cells-%d", gone.Process.Pid))
	stale := &cpuGroups{dir: dir, parts: map[string]string{"a": filepath.Join(dir, "a")}}
	if err := stale.mkdir(stale.dir, cpuProofShares); err != nil {
		t.Logf("no writable cpu hierarchy (%v): nothing to sweep", err)
		removeStaleGroups() // and it does nothing
		return
	}
	need(t, stale.mkdir(stale.parts["a"], cpuPartShares))
	left := exec.Command("sleep", "60") // a server the killed run left behind
	need(t, left.Start())
	defer func() { _ = left.Process.Kill(); _ = left.Wait() }()
	need(t, moveProcs(stale.parts["a"], left.Process.Pid))

	removeStaleGroups()
	if _, err := os.Stat(stale.dir); !errors.Is(err, os.ErrNotExist) {
		_ = stale.remove()
		t.Fatalf("the killed run's group is still there (%v)", err)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", left.Process.Pid))
	need(t, err)
	if home := cpuHomePath(); !strings.Contains(string(cg), ":cpu:"+home+"\n") && !strings.Contains(string(cg), ":cpu,cpuacct:"+home+"\n") {
		t.Fatalf("the process left behind is not back in the group the proof runs in (%s): %s", home, cg)
	}
}
