package mqlocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestStart_OwnNodeOnLoopbackOnlyAndNothingLeftAfterStop: the broker's AMQP, distribution and
// epmd ports listen on 127.0.0.1 only, none is a system default, and Stop leaves no listener
// and no folder behind.
func TestStart_OwnNodeOnLoopbackOnlyAndNothingLeftAfterStop(t *testing.T) {
	t.Parallel()
	b, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %s (node %s)", b.StartupTime, b.Node)
	for name, port := range map[string]int{"amqp": b.Port, "distribution": b.DistPort, "epmd": b.EPMDPort} {
		switch port {
		case 5672, 25672, 4369:
			t.Errorf("%s port %d is a system default", name, port)
		}
		addrs := listeners(t, port)
		if len(addrs) == 0 {
			t.Errorf("%s port %d: nothing listens", name, port)
		}
		for _, a := range addrs {
			if a != "127.0.0.1" && a != "::1" {
				t.Errorf("%s port %d listens on %s", name, port, a)
			}
		}
	}
	b.Stop()
	for _, port := range []int{b.Port, b.DistPort, b.EPMDPort} {
		if addrs := listeners(t, port); len(addrs) != 0 {
			t.Errorf("port %d still listens on %v after Stop", port, addrs)
		}
	}
	if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder %s left after Stop: %v", b.Dir, err)
	}
}

// listeners returns the addresses listening on TCP port (from /proc/net/tcp and tcp6).
func listeners(t *testing.T, port int) []string {
	var out []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			host, p, ok := strings.Cut(fields[1], ":")
			if !ok || p != fmt.Sprintf("%04X", port) {
				continue
			}
			switch host {
			case "0100007F":
				out = append(out, "127.0.0.1")
			case "00000000000000000000000001000000":
				out = append(out, "::1")
			default:
				out = append(out, host)
			}
		}
		f.Close()
	}
	return out
}
