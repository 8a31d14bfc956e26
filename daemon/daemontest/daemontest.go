// Package daemontest runs daemon replicas inside tests: each on a context of its own, stopped
// gracefully when the test ends, or killed on purpose mid-test as a crash would end it.
package daemontest

import (
	"context"
	"testing"
	"time"

	"github.com/idemops/idemops/daemon"
)

// stopTimeout bounds the graceful stop at the test's end.
const stopTimeout = 5 * time.Second

// Start starts d with a context of its own; the returned kill ends it abruptly (no resign, no
// graceful stop), as a crash would. The test's cleanup stops it gracefully if still alive.
func Start(t testing.TB, d *daemon.Daemon) (kill func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), stopTimeout)
		defer scancel()
		_ = d.Stop(sctx)
		cancel()
	})
	return cancel
}
