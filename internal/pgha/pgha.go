// Package pgha starts a private highly available PostgreSQL set, for the failover tests and for
// `idemops chaos --ha`: a pg_auto_failover monitor, a primary and one synchronous standby (Debian
// package postgresql-15-auto-failover), and a private pgbouncer in front of a server in
// transaction pooling mode.
//
// Everything listens on 127.0.0.1 on free ports, keeps its data under one short folder (on
// /dev/shm when it has room, else /tmp: pglocal.ScratchDir), and runs as the `postgres` system
// user when this process is root (PostgreSQL refuses root).
// Each node is one `pg_autoctl` process in its own process group, so Kill can take a node down
// the way a crashed machine goes (kill -9 of the keeper and its postgres), and Stop ends the
// whole set and removes its folder.
//
// The monitor is tuned for tests: health checks every second and a dead primary given up after
// a few seconds (production keeps pg_auto_failover's defaults; see docs/SCALING.md).
package pgha

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemops/idemops/internal/pglocal"
	"github.com/idemops/idemops/internal/ports"
	"github.com/jackc/pgx/v5"
)

// ErrNoAutoctl means pg_autoctl is not installed.
var ErrNoAutoctl = errors.New("pg_autoctl not found on PATH: install pg_auto_failover (Debian: apt-get install postgresql-15-auto-failover)")

// Where Debian installs the binaries when they are not on PATH (variables for the tests).
var (
	autoctlFallback = "/usr/bin/pg_autoctl"
	bouncerFallback = "/usr/sbin/pgbouncer"
)

// Options says how to start a set.
type Options struct {
	// StartTimeout bounds the whole start-up (default 120 s).
	StartTimeout time.Duration
	// Log receives pg_autoctl's and postgres's output; nil discards it.
	Log io.Writer
}

// Node is one data node of the set (a primary or a standby).
type Node struct {
	Name   string
	Port   int
	PGData string
	proc   *process
}

// Set is a running monitor + primary + standby.
type Set struct {
	Dir         string
	MonitorPort int
	Nodes       []*Node
	monitor     *process
	env         []string
	cred        *syscall.Credential
	log         io.Writer
	ports       []int // picked for the monitor and the nodes; given back by Stop
	stopOnce    sync.Once
}

type process struct {
	cmd    *exec.Cmd
	pgdata string
	done   chan struct{}
	err    error
}

// FindAutoctl returns the pg_autoctl binary and the pg_ctl it should drive.
func FindAutoctl() (autoctl, pgctl string, err error) {
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		if _, serr := os.Stat(autoctlFallback); serr != nil {
			return "", "", ErrNoAutoctl
		}
		autoctl = autoctlFallback
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(dirs) == 0 {
		p, err := exec.LookPath("pg_ctl")
		if err != nil {
			return "", "", errors.New("pg_ctl not found: install PostgreSQL server binaries (Debian: apt-get install postgresql)")
		}
		return autoctl, p, nil
	}
	// pg_autoctl is built for one major; the package for it is postgresql-15-auto-failover.
	for _, d := range dirs {
		if strings.Contains(d, "/15/") {
			return autoctl, d, nil
		}
	}
	return autoctl, dirs[len(dirs)-1], nil
}

// Start creates and starts a monitor, a primary and a standby, and returns when the primary is
// primary and the standby is its synchronous secondary.
func Start(ctx context.Context, opt Options) (*Set, error) {
	autoctl, pgctl, err := FindAutoctl()
	if err != nil {
		return nil, err
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = 120 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	cred, err := pglocal.ServerCredential()
	if err != nil {
		return nil, err
	}
	// Short: socket and data paths stay far below 100 bytes. On a memory filesystem when there
	// is one: the standby's pg_basebackup syncs every file it wrote, ~10 s of a set's start on a
	// busy disk, and nothing here outlives the set.
	dir, err := pglocal.ScratchDir("ha-")
	if err != nil {
		return nil, err
	}
	s := &Set{Dir: dir, cred: cred, log: opt.Log}
	if s.log == nil {
		s.log = io.Discard
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		// Postgres's default socket folder; the postgresql package normally creates it.
		if err := os.MkdirAll("/var/run/postgresql", 0o2775); err == nil {
			_ = os.Chown("/var/run/postgresql", int(cred.Uid), int(cred.Gid))
		}
	}
	// pg_autoctl keeps its config, state and pid files under the XDG folders (the pid files under
	// /tmp/pg_autoctl unless XDG_RUNTIME_DIR names a folder that exists): all of them inside the
	// set's folder, which Stop removes.
	run := filepath.Join(dir, "r")
	if err := os.Mkdir(run, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		_ = os.Chown(run, int(cred.Uid), int(cred.Gid))
	}
	s.env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir+"/x", "XDG_DATA_HOME="+dir+"/x",
		"XDG_RUNTIME_DIR="+run, "PGHOST=127.0.0.1")
	ports, err := freePorts(3)
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.ports = ports
	s.MonitorPort = ports[0]
	fail := func(err error) (*Set, error) {
		s.Stop()
		return nil, err
	}

	// pg_autoctl's own initdb syncs every file, which takes seconds on a busy machine: the
	// monitor's and the first node's clusters are initialized here, unsynced (a test set is
	// thrown away anyway), and pg_autoctl adopts them.
	mdata := filepath.Join(dir, "m")
	errs := make(chan error, 2)
	for _, d := range []string{mdata, filepath.Join(dir, "a")} {
		go func() { errs <- s.initdb(ctx, filepath.Dir(pgctl), d) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return fail(err)
		}
	}

	// The monitor: create, keep it on loopback (pg_autoctl defaults to '*'), then run it.
	if err := s.runOnce(ctx, autoctl, "create", "monitor", "--pgctl", pgctl, "--pgdata", mdata,
		"--pgport", strconv.Itoa(s.MonitorPort), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return fail(err)
	}
	if err := s.runOnce(ctx, autoctl, "config", "set", "--pgdata", mdata, "postgresql.listen_addresses", "127.0.0.1"); err != nil {
		return fail(err)
	}
	if s.monitor, err = s.spawn(autoctl, mdata, "run", "--pgdata", mdata); err != nil {
		return fail(err)
	}
	if err := s.tuneMonitor(ctx); err != nil {
		return fail(err)
	}

	monitorURL := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", s.MonitorPort)
	for i, name := range []string{"a", "b"} {
		n := &Node{Name: name, Port: ports[1+i], PGData: filepath.Join(dir, name)}
		n.proc, err = s.spawn(autoctl, n.PGData, "create", "postgres", "--pgctl", pgctl, "--pgdata", n.PGData,
			"--pgport", strconv.Itoa(n.Port), "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", name,
			"--auth", "trust", "--no-ssl", "--monitor", monitorURL, "--run")
		if err != nil {
			return fail(err)
		}
		s.Nodes = append(s.Nodes, n)
		want := map[string]string{"a": "single|wait_primary|primary"}
		if name == "b" {
			want = map[string]string{"a": "primary", "b": "secondary"}
		}
		if err := s.waitStates(ctx, want); err != nil {
			return fail(fmt.Errorf("node %s: %w", name, err))
		}
		if name == "a" {
			// pg_basebackup of the standby starts with a spread checkpoint, paced per dirty
			// buffer: flush them now so it has next to nothing to write.
			if err := s.checkpoint(ctx, n); err != nil {
				return fail(err)
			}
		}
	}
	return s, nil
}

func (s *Set) initdb(ctx context.Context, bin, pgdata string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", pgdata, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %v: %s", pgdata, err, lastLine(out))
	}
	// fsync off: the tests kill processes, never the machine, so the page cache survives and
	// what a commit wrote is still there; synchronous replication (the standby's ack before a
	// commit returns) is untouched. The standby inherits this file through pg_basebackup.
	//
	// shared_buffers 16 MB, not PostgreSQL's 128 MB: a test set holds a few MB of data, and a
	// kill -9 of a node has the kernel tear its processes' shared memory down on the CPUs
	// everything else in the test runs on. With 128 MB the cells proof's other cell stalled
	// 14-32 ms for its claims in flight at the kill in 6 of 11 runs; with 16 MB in none of 8
	// (notes/36-p99c.md).
	f, err := os.OpenFile(filepath.Join(pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("\n# pgha (tests): processes are killed, never the machine\nfsync = off\nshared_buffers = 16MB\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// runOnce runs one pg_autoctl command to completion.
func (s *Set) runOnce(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = s.env
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, s.log)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_autoctl %s %s: %v: %s", args[0], args[1], err, lastLine(out.Bytes()))
	}
	return nil
}

// spawn starts a long-lived pg_autoctl in its own process group; it gets SIGTERM (a clean stop
// of its postgres) if this process dies.
func (s *Set) spawn(bin, pgdata string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = s.env
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	p, err := startProcess(cmd, s.cred, pgdata)
	if err != nil {
		return nil, fmt.Errorf("start pg_autoctl %s: %w", args[0], err)
	}
	return p, nil
}

// startProcess starts cmd as cred in a process group of its own (so a stop reaches its
// children), with SIGTERM for it if this process dies; done closes when it has exited.
func startProcess(cmd *exec.Cmd, cred *syscall.Credential, pgdata string) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, pgdata: pgdata, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// exited says whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM to the process (pg_autoctl), which stops its services and its postgres
// in order. Not to its whole group: services that got the signal at the same moment as their
// supervisor exited first, the supervisor restarted them as if they had failed, and the set's stop
// then waited ~10 s for the restarted ones to give up (2 of 10 runs of the cells proof).
func (p *process) terminate() { _ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM) }

// reap waits for the process to exit, and kills its group (SIGKILL) when deadline comes first.
func (p *process) reap(deadline <-chan time.Time) {
	select {
	case <-p.done:
	case <-deadline:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// dial connects to url (which carries its own connect_timeout) until the server answers, giving
// up when p, the process that should serve it, exits or when ctx ends.
func dial(ctx context.Context, url string, p *process) (*pgx.Conn, error) {
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			return conn, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("exited (%v) before it accepted connections", p.err)
		case <-ctx.Done():
			return nil, fmt.Errorf("no connection before the deadline: %v", err)
		case <-time.After(100 * time.Millisecond): // the next attempt; the server is starting
		}
	}
}

// tuneMonitor waits for the monitor and makes it decide fast: health checks every second, a
// primary that fails its health check and is unheard of for 3 s is failed over, and its demotion waited for 2 s only.
func (s *Set) tuneMonitor(ctx context.Context) error {
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", s.MonitorPort)
	conn, err := dial(ctx, url, s.monitor)
	if err != nil {
		return fmt.Errorf("monitor: pg_autoctl on port %d: %w", s.MonitorPort, err)
	}
	defer conn.Close(context.Background())
	for _, kv := range [][2]string{
		{"health_check_period", "1000"}, {"health_check_timeout", "2000"}, {"health_check_max_retries", "1"},
		{"health_check_retry_delay", "500"}, {"node_considered_unhealthy_timeout", "3000"},
		{"primary_demote_timeout", "2000"}, {"startup_grace_period", "2000"},
	} {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET pgautofailover."+kv[0]+" = "+kv[1]); err != nil {
			return fmt.Errorf("monitor setting %s: %w", kv[0], err)
		}
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

func (s *Set) checkpoint(ctx context.Context, n *Node) error {
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("node %s: checkpoint: %w", n.Name, err)
	}
	return nil
}

// States returns each node's reported and goal state as the monitor sees them
// ("primary/primary").
func (s *Set) States(ctx context.Context) (map[string]string, error) {
	conn, err := s.monitorConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	return states(ctx, conn)
}

// monitorConn connects to the monitor's database, bounded by 3 s.
func (s *Set) monitorConn(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", s.MonitorPort))
}

// states reads the nodes' states over conn, bounded by 3 s.
func states(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rows, err := conn.Query(cctx, `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var n, r, g string
		if err := rows.Scan(&n, &r, &g); err != nil {
			return nil, err
		}
		out[n] = r + "/" + g
	}
	return out, rows.Err()
}

// waitStates waits until every named node reports (and has as its goal) one of the |-separated
// states, failing early when a node's pg_autoctl exits.
func (s *Set) waitStates(ctx context.Context, want map[string]string) error {
	var last map[string]string
	for {
		for _, n := range s.Nodes {
			if _, watched := want[n.Name]; !watched || n.proc == nil {
				continue
			}
			if n.proc.exited() {
				return fmt.Errorf("pg_autoctl of node %s exited: %v", n.Name, n.proc.err)
			}
		}
		if st, err := s.States(ctx); err == nil {
			last = st
			ok := true
			for name, states := range want {
				if !oneOf(st[name], states) {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("states %v not reached before the deadline (monitor says %v)", want, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func oneOf(state, alternatives string) bool {
	for _, a := range strings.Split(alternatives, "|") {
		if state == a+"/"+a {
			return true
		}
	}
	return false
}

// Primary returns the node that accepts writes now, asking the nodes themselves.
func (s *Set) Primary(ctx context.Context) (*Node, error) {
	for _, n := range s.Nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, n.URL("postgres"))
		if err == nil {
			var ro bool
			err = conn.QueryRow(cctx, `SELECT pg_is_in_recovery()`).Scan(&ro)
			conn.Close(context.Background())
			if err == nil && !ro {
				cancel()
				return n, nil
			}
		}
		cancel()
	}
	return nil, errors.New("no node accepts writes")
}

// WaitPromoted waits until a node other than old is primary (or wait_primary: a primary whose
// standby is gone) as the monitor sees it, and returns it. It asks the monitor every 100 ms over
// one connection, opened again only when it fails: a connection per question was a backend
// forked and authenticated on the monitor ten times a second through the whole failover, work
// the tests measuring what a failover costs others (the cells proof) counted as the failover's.
func (s *Set) WaitPromoted(ctx context.Context, old *Node) (*Node, error) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		if conn == nil {
			conn, _ = s.monitorConn(ctx)
		}
		if conn != nil {
			st, err := states(ctx, conn)
			if err != nil {
				conn.Close(context.Background())
				conn = nil
			}
			for _, n := range s.Nodes {
				if n != old && oneOf(st[n.Name], "primary|wait_primary|single") {
					return n, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no standby promoted: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill takes n down like a crashed machine: SIGKILL to its pg_autoctl (the keeper that would
// otherwise restart postgres), to its postmaster and to every postgres process the postmaster
// started (backends and the WAL sender run in sessions of their own and would otherwise live on
// for a moment, answering queries, until they notice the postmaster is gone).
func (s *Set) Kill(n *Node) error {
	postmaster := postmasterPID(n.PGData)
	if err := syscall.Kill(-n.proc.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill node %s: %w", n.Name, err)
	}
	if postmaster > 0 {
		_ = syscall.Kill(postmaster, syscall.SIGSTOP) // no new children while we list them
		for _, pid := range childrenOf(postmaster) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(postmaster, syscall.SIGKILL)
	}
	select {
	case <-n.proc.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("node %s: pg_autoctl still running 10 s after SIGKILL", n.Name)
	}
	return nil
}

// URL is the multi-host connection string for database db: libpq/pgx try every node and keep
// the one that accepts writes.
func (s *Set) URL(db string) string {
	hosts := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), db)
}

// URL is the connection string of this node alone.
func (n *Node) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", n.Port, db)
}

// CreateDatabase creates db on the primary (the standby gets it through replication).
func (s *Set) CreateDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	return err
}

// Stop ends every node (SIGTERM: pg_autoctl stops its postgres; SIGKILL after 20 s) and removes
// the set's folder.
func (s *Set) Stop() {
	s.stopOnce.Do(func() {
		var procs []*process
		for _, n := range s.Nodes {
			if n.proc != nil {
				procs = append(procs, n.proc)
			}
		}
		if s.monitor != nil {
			procs = append(procs, s.monitor)
		}
		for _, p := range procs {
			p.terminate()
		}
		deadline := time.After(20 * time.Second)
		for _, p := range procs {
			p.reap(deadline)
			if pm := postmasterPID(p.pgdata); pm > 0 { // left behind by a forced stop
				_ = syscall.Kill(pm, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(s.Dir)
		releasePorts(s.ports...)
	})
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after its closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) > 1 {
			if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

// postmasterPID reads the running postmaster's pid from pgdata, 0 when there is none.
func postmasterPID(pgdata string) int {
	f, err := os.Open(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(sc.Text()))
	return pid
}

// freePorts returns n distinct free loopback ports a node or the pooler can restart on (below
// the ephemeral range: no client connection's source port can take one while it is down), none
// of them held by another set of this process: sets started side by side (the cells proof's two)
// pick their ports before binding them, and a node binds its port only seconds after the pick.
func freePorts(n int) ([]int, error) {
	heldMu.Lock()
	defer heldMu.Unlock()
	for range 20 {
		ps, err := ports.Restartable(n)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(ps, func(p int) bool { return held[p] }) {
			for _, p := range ps {
				held[p] = true
			}
			return ps, nil
		}
	}
	return nil, fmt.Errorf("pgha: no %d free ports outside this process's other sets", n)
}

// releasePorts gives a stopped set's ports back.
func releasePorts(ps ...int) {
	heldMu.Lock()
	defer heldMu.Unlock()
	for _, p := range ps {
		delete(held, p)
	}
}

// held is every port a live set of this process picked.
var (
	heldMu sync.Mutex
	held   = map[int]bool{}
)

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
