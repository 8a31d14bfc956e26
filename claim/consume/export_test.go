package consume

// WatchStats returns a channel that receives a signal each time c's stats change, so a test
// waits on the consumer's own event instead of polling Stats.
func WatchStats(c *Consumer) <-chan struct{} {
	ch := make(chan struct{}, 1)
	f := func() {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending: the waiter reads Stats afresh anyway
		}
	}
	c.statsChanged.Store(&f)
	return ch
}
