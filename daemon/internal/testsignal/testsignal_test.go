package testsignal

import (
	"testing"
	"time"
)

func TestSignal_OffIsANoOpOnIsBufferedAndNeverBlocks(t *testing.T) {
	var s Signal[int]
	s.Signal(1) // off: no channel, no block, no panic
	s.Init()
	for i := range capacity + 10 { // past the buffer: dropped, not blocked
		s.Signal(i)
	}
	if got := s.Wait(t, time.Second); got != 0 {
		t.Fatalf("first value %d, want 0", got)
	}
	if got := s.WaitFor(t, time.Second, "5", func(v int) bool { return v == 5 }); got != 5 {
		t.Fatalf("WaitFor = %d", got)
	}
	s.Drain()
	select {
	case v := <-s.C():
		t.Fatalf("value %d left after Drain", v)
	default:
	}
}
