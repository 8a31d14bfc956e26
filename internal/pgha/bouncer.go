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
	"time"

	"github.com/idemops/idemops/internal/pglocal"
)

// ErrNoBouncer means pgbouncer is not installed.
var ErrNoBouncer = errors.New("pgbouncer not found on PATH: install it (Debian: apt-get install pgbouncer)")

// Bouncer is a private pgbouncer in transaction pooling mode.
type Bouncer struct {
	Port int
	dir  string
	proc *process
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
	b := &Bouncer{Port: ports[0], dir: dir}
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
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if opt.Log != nil {
		cmd.Stdout = io.MultiWriter(&out, opt.Log)
		cmd.Stderr = cmd.Stdout
	}
	if b.proc, err = startProcess(cmd, cred, ""); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	started = true
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := dial(dctx, b.URL(opt.Users[0], "postgres")+"&default_query_exec_mode=simple_protocol&connect_timeout=2", b.proc)
	if err != nil {
		if b.proc.exited() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			err = fmt.Errorf("%v: %s", err, lastLine(append(out.Bytes(), log...)))
		}
		b.Stop()
		return nil, fmt.Errorf("pgbouncer on port %d: %w", b.Port, err)
	}
	conn.Close(context.Background())
	return b, nil
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
		b.proc.terminate()
		b.proc.reap(time.After(10 * time.Second))
		_ = os.RemoveAll(b.dir)
		releasePorts(b.Port)
	})
}
