// Package pglocal starts a private PostgreSQL cluster from the server binaries installed on the
// machine, for `idemops serve`/`demo` and for the test helper when DATABASE_URL is unset.
//
// The cluster runs as a child process (postgres itself, not a daemonized pg_ctl start), so it
// dies with its owner. PostgreSQL refuses to run as root: when this process is root, initdb and
// postgres run as the unprivileged `postgres` system user, and the data folder is handed to it.
// That user cannot traverse a checkout under /root, so a data folder it cannot reach is moved to
// a folder under /tmp named after the requested path (stable across runs).
package pglocal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemops/idemops/internal/ports"
	"github.com/idemops/idemops/internal/sysuser"
	"github.com/jackc/pgx/v5"
)

// ErrNoServer means no PostgreSQL server binaries were found on the machine.
var ErrNoServer = errors.New("no PostgreSQL server binaries (initdb, postgres) found on PATH or under /usr/lib/postgresql/*/bin: install them (Debian: apt-get install postgresql)")

// Options says where and how to run the cluster.
type Options struct {
	// DataDir holds the cluster; it is created (initdb) when it holds none yet.
	DataDir string
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Fast trades durability for speed (fsync off): for tests only.
	Fast bool
	// MaxConnections defaults to 200.
	MaxConnections int
	// SharedBuffers is PostgreSQL's shared_buffers (default "256MB").
	SharedBuffers string
	// Log receives the server's output; nil discards it.
	Log *os.File
}

// Cluster is a running private PostgreSQL.
type Cluster struct {
	DataDir string
	Port    int
	cmd     *exec.Cmd
	done    chan struct{}
	once    sync.Once
	waitErr error
}

// URL is the superuser connection string for database name db.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// FindBinaries returns the folder holding initdb and postgres.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- { // newest version last in lexical order of majors ≥ 10
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", ErrNoServer
}

// Start initializes (when needed) and starts the cluster, and waits until it accepts connections.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if opt.MaxConnections == 0 {
		opt.MaxConnections = 200
	}
	cred, err := ServerCredential()
	if err != nil {
		return nil, err
	}
	dataDir, err := sysuser.ReachableDir(opt.DataDir, "idemops-pg-", cred)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data folder %s: %w", dataDir, err)
	}
	if cred != nil {
		if err := sysuser.ChownTree(dataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		init := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", dataDir, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
		init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := init.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %v: %s", dataDir, err, lastLine(out))
		}
	}
	port := opt.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	// The unix socket goes to a short folder under /tmp: socket paths must stay under ~100 bytes.
	sockDir, err := os.MkdirTemp("", "idemops-sock-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		_ = os.Chown(sockDir, int(cred.Uid), int(cred.Gid))
	}
	args := []string{"-D", dataDir, "-p", strconv.Itoa(port), "-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=" + strconv.Itoa(opt.MaxConnections),
		"-c", "shared_buffers=" + cmp.Or(opt.SharedBuffers, "256MB"),
	}
	if opt.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if opt.Log != nil {
		cmd.Stdout, cmd.Stderr = opt.Log, opt.Log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{DataDir: dataDir, Port: port, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		_ = os.RemoveAll(sockDir)
		close(c.done)
	}()
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited during start-up (%v); is another server using data folder %s?", c.waitErr, c.DataDir)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, c.URL("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("postgres did not accept connections on port %d within %s", c.Port, limit)
}

// Stop shuts the cluster down (fast shutdown) and waits for it to exit.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// Remove stops the cluster and deletes its data folder — the folder it really used, which is
// under /tmp when the requested one was out of the server user's reach: a throwaway cluster
// (tests, withpg) leaves nothing behind.
func (c *Cluster) Remove() {
	c.Stop()
	_ = os.RemoveAll(c.DataDir)
}

// ServerCredential is nil unless this process is root; then the servers (PostgreSQL, and the HA
// set's and pgbouncer, which refuse root too) run as the `postgres` system user.
func ServerCredential() (*syscall.Credential, error) {
	return sysuser.Credential("postgres", "running as root, and PostgreSQL refuses root: need the `postgres` system user (Debian: apt-get install postgresql)")
}

// freePort is a free loopback port the cluster can restart on (below the ephemeral range: no
// client connection's source port can take it while the server is down).
func freePort() (int, error) {
	ps, err := ports.Restartable(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
