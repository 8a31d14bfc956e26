package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestListen_BusyPortNamesTheFlagThatMovesIt: a console or metrics port another program holds
// stops the command with one line naming the flag to choose another address with.
func TestListen_BusyPortNamesTheFlagThatMovesIt(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	db := pgtest.URL(t)
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "digest-secret"), []byte("listen-test-secret-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"console", "--addr", addr, "--database-url", db, "--data-dir", dataDir}, "--addr"},
		{[]string{"daemon", "--metrics-addr", addr, "--database-url", db, "--data-dir", dataDir}, "--metrics-addr"},
	} {
		_, err := runIdemops(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "choose another with "+tt.flag) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v; want one line naming %s", tt.args, err, tt.flag)
		}
	}
	// The demo's own servers (paysim, payments HTTP and gRPC) name their flags the same way.
	if got := listenFailed(errAddrInUse(), addr, "api-addr").Error(); !strings.Contains(got, "--api-addr") {
		t.Errorf("a busy payments port says %q", got)
	}
}

func errAddrInUse() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	return err
}
