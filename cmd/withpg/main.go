// Command withpg runs a command with DATABASE_URL pointing at a private PostgreSQL cluster and
// AMQP_URL at a private RabbitMQ broker that live only as long as the command: `make test` uses
// it so that every test package shares one cluster and one broker instead of each starting
// their own. A variable already set is passed through and nothing is started for it.
//
//	go run ./cmd/withpg -- go test ./...
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"github.com/idemops/idemops/internal/mqlocal"
	"github.com/idemops/idemops/internal/pglocal"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: withpg -- COMMAND [ARGS...]  (runs COMMAND with DATABASE_URL set to a private PostgreSQL and AMQP_URL to a private RabbitMQ)")
		os.Exit(2)
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
				// Room for the benchmarks' million-key databases (two at a time) in shared memory; a
				// test run's small databases never fill it.
				SharedBuffers: "4GB"})
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
