package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemops/idemops/internal/testinfra/syncbuf"
)

// TestMakeRun_SignalStopsEverythingItStarted runs `make run` as a person does, with flags in
// ARGS, and stops it the two ways a person does: `kill PID` (SIGTERM to make alone, which make
// passes on to the binary its recipe exec'd) and Ctrl-C (SIGINT to the terminal's whole
// foreground group). Either way make exits and every process the demo started — the private
// PostgreSQL, RabbitMQ and epmd, anything else under make — is gone within 10 s. The RabbitMQ
// log lands under the data dir, and READY carries one API key per tenant.
func TestMakeRun_SignalStopsEverythingItStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts PostgreSQL and RabbitMQ")
	}
	// Beside the package's other tests: it mostly waits for the build and the servers, and
	// nothing else here runs make or writes bin/.
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		stop func(makePID int) error
	}{
		{"TERM to make", func(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }},
		{"Ctrl-C, INT to the group", func(pid int) error { return syscall.Kill(-pid, syscall.SIGINT) }},
	} {
		t.Run(tt.name, func(t *testing.T) { checkMakeRunStops(t, root, tt.stop) })
	}
}

func checkMakeRunStops(t *testing.T, root string, stop func(makePID int) error) {
	dir := t.TempDir()
	// The servers run as their system users: they must reach the data dir.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := "--data-dir " + dir + " --console-addr 127.0.0.1:0 --api-addr 127.0.0.1:0 --paysim-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 --traffic=false"
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "run", "ARGS="+args)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "DATABASE_URL" && name != "AMQP_URL" && !strings.HasPrefix(name, "IDEMOPS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make leads a group, as in a terminal
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- rest
			}
		}
		exited <- cmd.Wait()
	}()
	var started []int // every process under make, once the demo is up
	defer func() {
		// Whatever is left after a failure is ours to end: these pids were started by this test.
		for _, pid := range append(started, cmd.Process.Pid) {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()

	var line string
	select {
	case line = <-ready:
	case err := <-exited:
		t.Fatalf("make run exited before READY: %v\n%s", err, stderr.String())
	case <-time.After(4 * time.Minute):
		t.Fatalf("no READY from make run within 4 minutes\n%s", stderr.String())
	}
	var r demoReady
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("READY %s: %v", line, err)
	}
	if strings.HasSuffix(r.ConsoleURL, ":8080") || r.APIKeys["acme"] == "" || r.APIKeys["globex"] == "" || r.APIKey != r.APIKeys["acme"] || r.GRPCAddr == "" {
		t.Errorf("READY %s: want the ARGS' free ports, one key per tenant (acme, globex) and the gRPC address", line)
	}
	started = descendants(cmd.Process.Pid)
	names := map[string]bool{}
	for _, pid := range started {
		names[processName(pid)] = true
	}
	for _, want := range []string{"idemops", "postgres", "beam.smp", "epmd"} {
		if !names[want] {
			t.Errorf("no %s under make run (%v): the test would not see it stop", want, names)
		}
	}

	if err := stop(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	select {
	case <-exited:
	case <-time.After(time.Until(deadline)):
		t.Fatalf("make run still running 10 s after the signal\n%s", stderr.String())
	}
	for _, pid := range started {
		if !awaitExit(pid, deadline) && alive(pid) {
			t.Errorf("%s (pid %d) still running 10 s after the signal", processName(pid), pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "rabbitmq.log")); err != nil {
		t.Errorf("the RabbitMQ log is not under the data dir: %v", err)
	}
}

// descendants lists every process below pid (from /proc), children before grandchildren.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentOf(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// procStat is the fields of /proc/PID/stat after the command name: state, ppid, …
func procStat(pid int) (name string, fields []string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", nil
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", nil
	}
	return string(b[open+1 : end]), strings.Fields(string(b[end+1:]))
}

func parentOf(pid int) int {
	_, f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

func processName(pid int) string {
	name, _ := procStat(pid)
	return name
}

// awaitExit waits until process pid has terminated, or deadline: the kernel signals the
// termination on the process's pidfd (readable once it exits, a zombie included). It reports
// whether the process is gone.
func awaitExit(pid int, deadline time.Time) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return !alive(pid) // ESRCH: gone already
	}
	defer unix.Close(fd)
	for {
		ms := max(int(time.Until(deadline).Milliseconds()), 0)
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 1
	}
}

// alive: the process exists and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	_, f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}
