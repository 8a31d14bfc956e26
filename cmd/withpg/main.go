// Command withpg runs a command with DATABASE_URL pointing at a private PostgreSQL cluster that
// lives only as long as the command: `make test` uses it so that every test package shares one
// cluster instead of each starting its own.
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
	"syscall"

	"github.com/idemops/idemops/internal/pglocal"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: withpg -- COMMAND [ARGS...]  (runs COMMAND with DATABASE_URL set to a private PostgreSQL)")
		os.Exit(2)
	}
	if os.Getenv("DATABASE_URL") != "" {
		os.Exit(runCmd(args))
	}
	dir, err := os.MkdirTemp("", "idemops-withpg-")
	if err != nil {
		fatal(err)
	}
	c, err := pglocal.Start(context.Background(), pglocal.Options{DataDir: dir + "/data", Fast: true, MaxConnections: 400,
		// Room for the benchmarks' million-key databases (two at a time) in shared memory; a
		// test run's small databases never fill it.
		SharedBuffers: "4GB"})
	if err != nil {
		os.RemoveAll(dir)
		fatal(err)
	}
	os.Setenv("DATABASE_URL", c.URL("postgres"))
	code := runCmd(args)
	c.Stop()
	os.RemoveAll(dir)
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
