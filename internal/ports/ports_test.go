package ports

import (
	"net"
	"strconv"
	"testing"
)

// TestRestartable_BelowTheEphemeralRangeDistinctAndFree: the ports lie below the kernel's
// ephemeral range (where no connection's source port can take them), are distinct, and free
// once returned.
func TestRestartable_BelowTheEphemeralRangeDistinctAndFree(t *testing.T) {
	low := ephemeralLow()
	ps, err := Restartable(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if p < floor || p >= low {
			t.Errorf("port %d outside [%d, %d)", p, floor, low)
		}
		if seen[p] {
			t.Errorf("port %d twice in %v", p, ps)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free after Restartable: %v", p, err)
			continue
		}
		l.Close()
	}
}

// TestPick_NeverAPortInUse: in a range where all but two ports are held, pick returns exactly
// those two, and asking for three fails with a reason instead of returning a held one.
func TestPick_NeverAPortInUse(t *testing.T) {
	const lo, hi = 20100, 20112
	var free []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for p := lo; p < hi; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // someone else holds it: in use all the same
		}
		if len(free) < 2 {
			l.Close()
			free = append(free, p)
			continue
		}
		held = append(held, l)
	}
	if len(free) < 2 {
		t.Fatalf("fewer than two free ports in %d-%d on this machine", lo, hi-1)
	}
	got, err := pick(2, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	if !((got[0] == free[0] && got[1] == free[1]) || (got[0] == free[1] && got[1] == free[0])) {
		t.Errorf("pick(2) = %v; want the free ones %v", got, free)
	}
	if got, err := pick(3, lo, hi); err == nil {
		t.Errorf("pick(3) with two free = %v; want an error", got)
	}
}
