package demo

import "testing"

// A downstream key shorter than the 16 characters a notification's id takes does not panic (in
// a reclaim worker it took the whole demo down: console, API and the private PostgreSQL).
func TestNotificationDoc_ShortDownstreamKey(t *testing.T) {
	for dk, want := range map[string]string{"abc": "ntf_abc", "0123456789abcdef0123": "ntf_0123456789abcdef"} {
		if got := notificationDoc(dk).ResourceID; got != want {
			t.Errorf("notificationDoc(%q) = %q, want %q", dk, got, want)
		}
	}
}
