// Package changes is a broadcast for tests that wait on a signal: a waiter takes Next before it
// checks its condition, and the next Notify after that wakes it — so no change between the check
// and the wait is missed, and nothing polls.
package changes

import "sync"

// Changes wakes every waiter at each Notify. The zero value is ready to use; it is safe for
// concurrent use.
type Changes struct {
	mu sync.Mutex
	ch chan struct{}
}

// Next is closed by the first Notify after this call.
func (c *Changes) Next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Notify wakes whoever holds a Next.
func (c *Changes) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// Write notifies: a Changes is the io.Writer of progress lines (a cells move's steps), each line a
// change.
func (c *Changes) Write(p []byte) (int, error) {
	c.Notify()
	return len(p), nil
}
