package pgha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemops/idemops/internal/pglocal"
	"github.com/jackc/pgx/v5"
)

// ErrNoBouncer means pgbouncer is not installed.
var ErrNoBouncer = errors.New("pgbouncer not found on PATH: install it (Debian: apt-get install pgbouncer)")

// Bouncer is a private pgbouncer in transaction pooling mode.
type Bouncer struct {
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

// BouncerOptions says what the pooler fronts.
type BouncerOptions struct {
	// Host and Port of the server behind the pooler (loopback).
	Host string
	Port int
	// PoolSize is the number of server connections per database and user (default 10).
	PoolSize int
	// Users may connect (trust, loopback only); default postgres.
	Users []string
	Log   io.Writer
}

// StartBouncer starts pgbouncer on a free loopback port in front of opt.Host:opt.Port, pooling
// by transaction, with trust authentication for the loopback users listed in its userlist.
func StartBouncer(ctx context.Context, opt BouncerOptions) (*Bouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat(bouncerFallback); serr != nil {
			return nil, ErrNoBouncer
		}
		bin = bouncerFallback
	}
	if opt.PoolSize == 0 {
		opt.PoolSize = 10
	}
	cred, err := pglocal.ServerCredential() // pgbouncer refuses to run as root too
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgb-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Bouncer{Port: ports[0], dir: dir, done: make(chan struct{})}
	started := false
	defer func() {
		if !started { // every return before pgbouncer runs; Stop releases the port after
			releasePorts(b.Port)
		}
	}()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = %s
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = %d
max_client_conn = 400
ignore_startup_parameters = extra_float_digits,options
server_reset_query =
logfile = %s/pgbouncer.log
`, opt.Host, opt.Port, b.Port, dir, dir, opt.PoolSize, dir)
	if len(opt.Users) == 0 {
		opt.Users = []string{"postgres"}
	}
	var users strings.Builder
	for _, u := range opt.Users {
		if strings.ContainsAny(u, "\"\n") {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer user %q: quotes and newlines are not allowed", u)
		}
		fmt.Fprintf(&users, "%q \"\"\n", u)
	}
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": users.String()}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if cred != nil {
		for _, p := range []string{dir, dir + "/pgbouncer.ini", dir + "/users.txt"} {
			_ = os.Chown(p, int(cred.Uid), int(cred.Gid))
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var out bytes.Buffer
	b.cmd.Stdout = &out
	b.cmd.Stderr = &out
	if opt.Log != nil {
		b.cmd.Stdout = io.MultiWriter(&out, opt.Log)
		b.cmd.Stderr = b.cmd.Stdout
	}
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	started = true
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, b.URL(opt.Users[0], "postgres")+"&default_query_exec_mode=simple_protocol")
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return b, nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			b.Stop()
			return nil, fmt.Errorf("pgbouncer exited (%v): %s", b.err, lastLine(append(out.Bytes(), log...)))
		default:
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgbouncer did not accept connections on port %d within 15 s: %v", b.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// URL is the connection string for user and database db through the pooler. pgx must not keep
// named prepared statements across transactions behind a transaction pooler (pgbouncer before
// 1.21 cannot track them): callers add default_query_exec_mode=exec (or simple_protocol).
func (b *Bouncer) URL(user, db string) string {
	return "postgres://" + user + "@127.0.0.1:" + strconv.Itoa(b.Port) + "/" + db + "?sslmode=disable"
}

// Stop ends pgbouncer and removes its folder.
func (b *Bouncer) Stop() {
	b.once.Do(func() {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
		_ = os.RemoveAll(b.dir)
		releasePorts(b.Port)
	})
}
