// Package testsignal lets code announce that it passed a point ("elected", "run finished") so
// a test can wait for exactly that instead of polling or sleeping, after River's
// riverinternal/testsignal. A Signal is compiled in always but off until a test calls Init:
// switched off, Signal costs one nil check.
package testsignal

import (
	"testing"
	"time"
)

// capacity is how many unread signals a Signal keeps; beyond it new ones are dropped, so a test
// that stops listening never blocks the code under test.
const capacity = 1000

// Signal carries values of T from the code to a test. The zero value is off.
type Signal[T any] struct {
	ch chan T
}

// Init switches the signal on (again: no change). Call it before the code that signals starts.
func (s *Signal[T]) Init() {
	if s.ch == nil {
		s.ch = make(chan T, capacity)
	}
}

// C is the channel the values arrive on, for a test that selects over several signals.
func (s *Signal[T]) C() <-chan T { return s.ch }

// Signal records that the point was passed with v; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next value, failing t after timeout.
func (s *Signal[T]) Wait(t testing.TB, timeout time.Duration) T {
	t.Helper()
	if s.ch == nil {
		t.Fatal("testsignal: Wait on a signal that was not Init'ed")
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		var zero T
		t.Fatalf("testsignal: no %T signal within %s", zero, timeout)
		return zero
	}
}

// WaitFor returns the first value for which ok holds, skipping the others, failing t after
// timeout.
func (s *Signal[T]) WaitFor(t testing.TB, timeout time.Duration, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("testsignal: timed out after %s waiting for %s", timeout, what)
		}
		timer := time.NewTimer(left)
		select {
		case v := <-s.ch:
			timer.Stop()
			if ok(v) {
				return v
			}
		case <-timer.C:
			t.Fatalf("testsignal: timed out after %s waiting for %s", timeout, what)
		}
	}
}

// Drain discards the values waiting, so a following Wait sees only later ones.
func (s *Signal[T]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}
