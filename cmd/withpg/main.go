// Command withpg runs a command with DATABASE_URL pointing at a private PostgreSQL cluster and
// AMQP_URL at a private RabbitMQ broker that live only as long as the command: `make test` uses
// it so that every test package shares one cluster and one broker instead of each starting
// their own. A variable already set is passed through and nothing is started for it.
//
//	go run ./cmd/withpg -- go test ./...
//	go run ./cmd/withpg --shared-buffers 4GB -- go test -bench . ./...
//
// The cluster's shared_buffers is 256MB unless --shared-buffers says otherwise: `make bench` asks
// for 4GB so that its million-key databases stay in memory. Tests' databases are small, and a
// large pool costs every CREATE and DROP DATABASE and checkpoint a scan of all its buffers (a
// whole `make test` phase 1 spent ~9% more PostgreSQL CPU with 4GB).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/idemops/idemops/internal/mqlocal"
	"github.com/idemops/idemops/internal/pglocal"
)

func main() {
	args := os.Args[1:]
	sharedBuffers := "256MB"
	if len(args) > 0 && (args[0] == "--shared-buffers" || strings.HasPrefix(args[0], "--shared-buffers=")) {
		if v, ok := strings.CutPrefix(args[0], "--shared-buffers="); ok {
			sharedBuffers, args = v, args[1:]
		} else if len(args) > 1 {
			sharedBuffers, args = args[1], args[2:]
		} else {
			usage("--shared-buffers needs a size, e.g. 4GB")
		}
		if !validSize(sharedBuffers) {
			usage(fmt.Sprintf("--shared-buffers %q: want a size such as 256MB or 4GB", sharedBuffers))
		}
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage("")
	}
	var (
		wg      sync.WaitGroup
		stops   []func()
		mu      sync.Mutex
		failure error
	)
	fail := func(err error) {
		mu.Lock()
		failure = errors.Join(failure, err)
		mu.Unlock()
	}
	if os.Getenv("DATABASE_URL") == "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, err := pglocal.ScratchDir("idemops-withpg-")
			if err != nil {
				fail(err)
				return
			}
			c, err := pglocal.Start(context.Background(), pglocal.Options{DataDir: dir + "/data", Fast: true, MaxConnections: 400,
				SharedBuffers: sharedBuffers})
			if err != nil {
				os.RemoveAll(dir)
				fail(err)
				return
			}
			mu.Lock()
			stops = append(stops, func() { c.Remove(); os.RemoveAll(dir) })
			mu.Unlock()
			os.Setenv("DATABASE_URL", c.URL("postgres"))
		}()
	}
	if os.Getenv("AMQP_URL") == "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := mqlocal.Start(context.Background(), mqlocal.Options{})
			if err != nil {
				fail(err)
				return
			}
			mu.Lock()
			stops = append(stops, b.Stop)
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "withpg: private RabbitMQ up in %.1fs\n", b.StartupTime.Seconds())
			os.Setenv("AMQP_URL", b.URL())
		}()
	}
	wg.Wait()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if failure != nil {
		stopAll()
		fatal(failure)
	}
	code := runCmd(args)
	stopAll()
	os.Exit(code)
}

func runCmd(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 127
	}
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "withpg:", err)
	os.Exit(1)
}

func usage(problem string) {
	if problem != "" {
		fmt.Fprintln(os.Stderr, "withpg: "+problem)
	}
	fmt.Fprintln(os.Stderr, "usage: withpg [--shared-buffers SIZE] -- COMMAND [ARGS...]  (runs COMMAND with DATABASE_URL set to a private PostgreSQL and AMQP_URL to a private RabbitMQ; SIZE is the cluster's shared_buffers, default 256MB)")
	os.Exit(2)
}

// validSize: a PostgreSQL memory size, digits then kB, MB, GB or TB.
func validSize(v string) bool {
	n := strings.TrimRight(v, "kMGTB")
	unit := v[len(n):]
	if n == "" || strings.Trim(n, "0123456789") != "" {
		return false
	}
	switch unit {
	case "kB", "MB", "GB", "TB":
		return true
	}
	return false
}
