// Package mqlocal starts a private RabbitMQ broker from the server installed on the machine
// (Debian: rabbitmq-server), for `idemops demo` and for `make test` when AMQP_URL is unset.
//
// The broker is a node of its own — node name idemops-<pid>-<n>@localhost, its own AMQP,
// distribution and epmd ports (free ones, on 127.0.0.1), its own data, log, config and Erlang
// cookie under one folder — so it never meets a system instance on the default ports (5672,
// 25672, epmd 4369). epmd runs as a child process of this one, in the foreground, so nothing
// is left behind. As root the broker runs as the `rabbitmq` system user, with its folder under
// /tmp. Start-up (the Erlang VM boots RabbitMQ) takes several seconds; it is bounded by
// Options.StartTimeout.
package mqlocal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemops/idemops/internal/ports"
	"github.com/idemops/idemops/internal/sysuser"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNoServer means no RabbitMQ server was found on the machine.
var ErrNoServer = errors.New("no RabbitMQ server found (rabbitmq-server under /usr/lib/rabbitmq/bin or on PATH): install it (Debian: apt-get install rabbitmq-server)")

// Options says where and how to run the broker.
type Options struct {
	// Dir holds the broker's data, logs, config and cookie; it is created when missing. Empty:
	// a fresh folder under /tmp, removed by Stop.
	Dir string
	// Port is the AMQP port on 127.0.0.1; 0 picks a free one.
	Port int
	// StartTimeout bounds start-up (default 90 s: about 6 s on an idle 2-core machine, measured
	// up to 52 s under a load of 20).
	StartTimeout time.Duration
	// Log receives the broker's output; nil writes it to Dir/broker.log.
	Log *os.File
}

// Broker is a running private RabbitMQ.
type Broker struct {
	Dir      string
	Node     string
	Port     int
	DistPort int
	EPMDPort int
	// StartupTime is how long the last start took until the broker accepted AMQP connections.
	StartupTime time.Duration

	bin     string
	cred    *syscall.Credential
	log     *os.File
	ownDir  bool
	epmd    *exec.Cmd
	epmdEnd chan struct{}

	mu   sync.Mutex
	node *exec.Cmd
	done chan struct{}
	werr error
}

var seq atomic.Int64

// URL is the AMQP URL of the broker (the default guest user, allowed from loopback only).
func (b *Broker) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", b.Port) }

// FindServer returns the folder holding rabbitmq-server's start script.
func FindServer() (string, error) {
	for _, d := range []string{"/usr/lib/rabbitmq/bin"} {
		if _, err := os.Stat(filepath.Join(d, "rabbitmq-server")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		// Debian's /usr/sbin/rabbitmq-server is a wrapper that switches user itself; the real
		// script lives beside rabbitmq-env.
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "rabbitmq-env")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoServer
}

// Start starts a broker and waits until it accepts AMQP connections, or fails with one line.
func Start(ctx context.Context, opt Options) (*Broker, error) {
	bin, err := FindServer()
	if err != nil {
		return nil, err
	}
	epmdBin, err := exec.LookPath("epmd")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/epmd"); serr != nil {
			return nil, fmt.Errorf("rabbitmq: no epmd (Erlang's port mapper) on PATH: %w", err)
		}
		epmdBin = "/usr/bin/epmd"
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = 90 * time.Second
	}
	cred, err := sysuser.Credential("rabbitmq", "running as root: need the `rabbitmq` system user to run the broker as (Debian: apt-get install rabbitmq-server)")
	if err != nil {
		return nil, err
	}
	b := &Broker{Dir: opt.Dir, bin: bin, cred: cred, log: opt.Log,
		Node: fmt.Sprintf("idemops-%d-%d@localhost", os.Getpid(), seq.Add(1))}
	if b.Dir == "" {
		// Short and under /tmp: the rabbitmq user must reach it, and socket-ish paths stay short.
		if b.Dir, err = os.MkdirTemp("", "idemops-mq-"); err != nil {
			return nil, err
		}
		b.ownDir = true
	}
	if err := b.prepareDir(); err != nil {
		b.cleanup()
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		b.cleanup()
		return nil, err
	}
	b.Port, b.DistPort, b.EPMDPort = ports[0], ports[1], ports[2]
	if opt.Port != 0 {
		b.Port = opt.Port
	}
	if err := b.writeConfig(); err != nil {
		b.cleanup()
		return nil, err
	}
	if b.log == nil {
		f, err := os.OpenFile(filepath.Join(b.Dir, "broker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			b.cleanup()
			return nil, err
		}
		b.log = f
	}
	// Our own epmd, in the foreground, as a child: the node registers with it instead of the
	// machine's (port 4369), and it dies with us.
	b.epmd = exec.Command(epmdBin, "-port", strconv.Itoa(b.EPMDPort), "-address", "127.0.0.1")
	b.epmd.Env = b.env()
	b.epmd.Stdout, b.epmd.Stderr = b.log, b.log
	b.epmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := b.epmd.Start(); err != nil {
		b.cleanup()
		return nil, fmt.Errorf("rabbitmq: start epmd: %w", err)
	}
	b.epmdEnd = make(chan struct{})
	go func() { _ = b.epmd.Wait(); close(b.epmdEnd) }()
	if err := b.startNode(ctx, opt.StartTimeout); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// startNode starts the RabbitMQ node (the data folder kept) and waits for AMQP.
func (b *Broker) startNode(ctx context.Context, limit time.Duration) error {
	began := time.Now()
	cmd := exec.Command(filepath.Join(b.bin, "rabbitmq-server"))
	cmd.Dir = b.Dir
	cmd.Env = b.env()
	cmd.Stdout, cmd.Stderr = b.log, b.log
	// Setpgid: the start script runs erl as its child; Stop signals the script, which stops the
	// node gracefully, and kills the group if that takes too long.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("rabbitmq: start %s: %w", cmd.Path, err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.node, b.done = cmd, done
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		b.mu.Lock()
		b.werr = err
		b.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("rabbitmq exited during start-up (%v); see %s", b.waitErr(), b.logPath())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		conn, err := amqp.DialConfig(b.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			_ = conn.Close()
			b.StartupTime = time.Since(began)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("rabbitmq did not accept connections on 127.0.0.1:%d within %s; see %s", b.Port, limit, b.logPath())
}

func (b *Broker) waitErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.werr
}

func (b *Broker) logPath() string {
	if b.log != nil {
		return b.log.Name()
	}
	return b.Dir
}

// stopNode stops the node gracefully (SIGTERM to the start script), killing its process group
// after 30 s.
func (b *Broker) stopNode() {
	b.mu.Lock()
	cmd, done := b.node, b.done
	b.node = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	// The start script may be gone while erl lingers: make sure the group is.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Restart stops the node and starts it again on the same ports and data (durable queues and
// persistent messages survive); tests use it to restart the broker mid-stream.
func (b *Broker) Restart(ctx context.Context) error {
	b.stopNode()
	return b.startNode(ctx, 90*time.Second)
}

// Stop shuts the broker and its epmd down and, when Start made the folder, removes it.
func (b *Broker) Stop() {
	b.stopNode()
	if b.epmd != nil && b.epmd.Process != nil {
		_ = b.epmd.Process.Kill()
		<-b.epmdEnd
	}
	b.cleanup()
}

func (b *Broker) cleanup() {
	if b.ownDir {
		_ = os.RemoveAll(b.Dir)
	}
}

// env is the environment of every broker process: only our folder, ports and node name.
func (b *Broker) env() []string {
	home := filepath.Join(b.Dir, "home")
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"ERL_EPMD_PORT=" + strconv.Itoa(b.EPMDPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME=" + b.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(b.Port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(b.DistPort),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(b.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(b.Dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(b.Dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(b.Dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(b.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(b.Dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_PID_FILE=" + filepath.Join(b.Dir, "broker.pid"),
		"RABBITMQ_PLUGINS_EXPAND_DIR=" + filepath.Join(b.Dir, "plugins-expand"),
		// Two schedulers and no busy-waiting: the broker shares a small machine with the tests.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 2:2 +sbwt none +sbwtdcpu none +sbwtdio none" +
			" -kernel inet_dist_use_interface {127,0,0,1}", // distribution on loopback only
	}
	return env
}

// prepareDir creates the folder with its home and Erlang cookie, owned by the broker's user.
func (b *Broker) prepareDir() error {
	// The rabbitmq user cannot reach a checkout under /root: then the folder is a stable one
	// under /tmp named after the requested one.
	dir, err := sysuser.ReachableDir(b.Dir, "idemops-mq-", b.cred)
	if err != nil {
		return err
	}
	b.Dir = dir
	for _, d := range []string{"home", "mnesia", "log", "plugins-expand"} {
		if err := os.MkdirAll(filepath.Join(b.Dir, d), 0o700); err != nil {
			return fmt.Errorf("rabbitmq folder: %w", err)
		}
	}
	cookie := filepath.Join(b.Dir, "home", ".erlang.cookie")
	if _, err := os.Stat(cookie); errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 16)
		_, _ = rand.Read(raw)
		if err := os.WriteFile(cookie, []byte(strings.ToUpper(hex.EncodeToString(raw))), 0o400); err != nil {
			return fmt.Errorf("rabbitmq cookie: %w", err)
		}
	}
	if b.cred != nil {
		if err := sysuser.ChownTree(b.Dir, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// writeConfig writes the broker's config: loopback listener, no plugins, a small disk floor.
func (b *Broker) writeConfig() error {
	files := map[string]string{
		"rabbitmq-env.conf": "# empty: every setting comes from the environment of the start\n",
		"rabbitmq.conf": fmt.Sprintf(`listeners.tcp.default = 127.0.0.1:%d
disk_free_limit.absolute = 50MB
log.console = true
log.console.level = warning
log.file = false
`, b.Port),
		"advanced.config": "[].\n",
		"enabled_plugins": "[].\n",
	}
	for name, text := range files {
		p := filepath.Join(b.Dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return fmt.Errorf("rabbitmq config: %w", err)
		}
		if b.cred != nil {
			_ = os.Chown(p, int(b.cred.Uid), int(b.cred.Gid))
		}
	}
	return nil
}

// freePorts returns n distinct free loopback ports the node can restart on (below the ephemeral
// range: no client connection's source port can take one while the node is down).
func freePorts(n int) ([]int, error) {
	ps, err := ports.Restartable(n)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	return ps, nil
}
