// Package ports picks loopback ports for servers that must come back on the same port after a
// restart: the private RabbitMQ, the HA set's nodes and pooler, the chaos world's replicas.
//
// A port from the kernel's ephemeral range — what listening on port 0 gives — is also where the
// kernel picks the source port of every outgoing connection on the machine. While a server on
// such a port is down for a restart, any client connection (a database pool, a test's HTTP
// client) may take the port as its source, and the restarted server fails with EADDRINUSE for as
// long as that connection lives: a chaos run once lost its broker that way, and with it every
// outbox row after the restart. Ports from here lie below the ephemeral range, where the kernel
// never assigns source ports, so only another listener can hold them.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// The range picked from: [floor, ephemeral low) — by default 16384–32767.
const (
	floor    = 16384
	attempts = 500
)

// Restartable returns n distinct free loopback ports below the ephemeral range, each checked
// by listening on it (all held open together while picking). With no room below the range (a
// machine whose ephemeral range starts low), it falls back to ports the kernel picks.
func Restartable(n int) ([]int, error) {
	low := ephemeralLow()
	if low-floor < 1024 {
		return kernelPicked(n)
	}
	return pick(n, floor, low)
}

// pick returns n distinct free loopback ports of [lo, hi), tried in random order.
func pick(n, lo, hi int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for try := 0; len(ports) < n; try++ {
		if try == attempts {
			return nil, fmt.Errorf("ports: no %d free loopback ports found in %d-%d after %d tries", n, lo, hi-1, attempts)
		}
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// Addr is one Restartable port as a 127.0.0.1:PORT address.
func Addr() (string, error) {
	p, err := Restartable(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read:
// Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 0 {
		return 32768
	}
	return low
}

func kernelPicked(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("ports: pick a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
