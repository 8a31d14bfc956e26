package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemops/idemops/internal/ports"
)

// proc is one part of the world running as a process of its own (this binary re-executed with
// "chaos-part ROLE"). It can be killed with SIGKILL and started again with the same arguments.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	logs string // folder of the per-process logs

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	ready string // what the process printed after READY
	runs  int

	cycling atomic.Bool // a kill and its restart are under way (claimCycle)
}

// claimCycle marks p for a kill and its restart; false when p is down or a kill and restart are
// already under way. A second kill then would kill the restart's own process, and the two restart
// loops would race each other for the port (seen in a 5-minute run: the console never came back).
// The fault's restart clears it when it ends.
func (p *proc) claimCycle() bool {
	return p.pid() != 0 && p.cycling.CompareAndSwap(false, true)
}

// start runs the process and waits (bounded) for its READY line.
func (p *proc) start(ctx context.Context, limit time.Duration) error {
	p.mu.Lock()
	p.runs++
	logf, err := os.OpenFile(filepath.Join(p.logs, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	fmt.Fprintf(logf, "--- start %d at %s\n", p.runs, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.mu.Unlock()
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		logf.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	readyc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "READY "); ok {
				select {
				case readyc <- rest:
				default:
				}
			}
			fmt.Fprintln(logf, line)
		}
	}()
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case r := <-readyc:
		p.mu.Lock()
		p.ready = r
		p.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("%s exited before it was ready (see %s)", p.name, filepath.Join(p.logs, p.name+".log"))
	case <-t.C:
		p.kill()
		return fmt.Errorf("%s not ready within %v (see %s)", p.name, limit, filepath.Join(p.logs, p.name+".log"))
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// pid is the running process's id (0 when none).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// kill is kill -9 of the process group, waiting until it is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// stop is a graceful SIGTERM, then kill -9 after 10 s.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// freeAddr picks a loopback port a replica restarts on, below the ephemeral range: while the
// replica is down, no client connection's source port can take it.
func freeAddr() (string, error) { return ports.Addr() }

// backend is one payments replica behind the proxy.
type backend struct {
	name     string
	url      *url.URL
	grpc     string // the replica's gRPC address
	down     atomic.Bool
	inflight atomic.Int64
}

// proxy is the loopback round robin in front of the payments replicas. A replica marked down
// (killed, restarting) is skipped; a request that finds its replica dead is answered 502, which
// the client retries with the same key.
type proxy struct {
	backends []*backend
	next     atomic.Uint64
	srv      *http.Server
	URL      string
}

func startProxy(backends []*backend) (*proxy, error) {
	p := &proxy{backends: backends}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: 60 * time.Second}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := p.pick()
		b.inflight.Add(1)
		defer b.inflight.Add(-1)
		rp := &httputil.ReverseProxy{Transport: tr,
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(b.url); pr.Out.Host = pr.In.Host },
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusBadGateway)
				fmt.Fprintf(w, `{"type":"about:blank","title":"Bad gateway","detail":%q}`, b.name+" did not answer")
			}}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(l) }()
	p.URL = "http://" + l.Addr().String()
	return p, nil
}

// pick is round robin over the replicas not marked down (all of them when every one is).
func (p *proxy) pick() *backend {
	n := uint64(len(p.backends))
	start := p.next.Add(1)
	for i := uint64(0); i < n; i++ {
		b := p.backends[(start+i)%n]
		if !b.down.Load() {
			return b
		}
	}
	return p.backends[start%n]
}

func (p *proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		_ = p.srv.Close()
	}
}
