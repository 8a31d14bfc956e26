package changes

import "testing"

// A Next taken before a Notify is closed by it; one taken after waits for the next Notify.
func TestChanges_NextClosesAtTheFollowingNotify(t *testing.T) {
	var c Changes
	before := c.Next()
	c.Notify()
	select {
	case <-before:
	default:
		t.Fatal("a Next taken before Notify is still open")
	}
	after := c.Next()
	select {
	case <-after:
		t.Fatal("a Next taken after Notify is closed already")
	default:
	}
	if _, err := c.Write([]byte("move acme fenced\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-after:
	default:
		t.Fatal("a Write did not notify")
	}
}
