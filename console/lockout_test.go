package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
)

// TestLogin_LockoutCannotBeRaced fires 39 wrong-password sign-ins for one account at once, then
// the right one. Attempts are counted in PostgreSQL before any password check, so only the first
// UserLimit (5) of them may spend an argon2 verification; the rest get 429 + Retry-After.
//
// Order: the 39 wrong attempts go first (all released together), the right one after they have
// been answered. Firing all 40 at once would make the outcome depend on scheduling: a right
// password among the first 5 counted legitimately signs in and resets the account's count. With
// this order the assertion is exact and cannot pass by luck: ≤ 5 checks, and the right password,
// arriving during the lockout, gets 429 and no session. (Before the fix, every one of the 39
// parallel attempts passed the read-only lockout check and was verified.)
func TestLogin_LockoutCannotBeRaced(t *testing.T) {
	b := setup(t, func(c *Config) {
		// The account limit is the one measured; the address limit (all requests come from
		// loopback) is set out of the way so exactly one lockout starts.
		c.Throttle = access.ThrottleConfig{UserLimit: 5, IPLimit: 1000, Window: 15 * time.Minute, Lockout: 15 * time.Minute}
	})
	b.addOperator("alice", access.RoleViewer, "acme")

	const wrong = 39
	reqs := make([]*http.Request, wrong)
	clients := make([]*client, wrong)
	for i := range reqs {
		clients[i] = b.client()
		tok := clients[i].loginToken()
		form := url.Values{"csrf": {tok}, "name": {"Alice"}, "password": {"wrong password " + strconv.Itoa(i)}}
		reqs[i], _ = http.NewRequest("POST", b.ts.URL+"/login", strings.NewReader(form.Encode()))
		reqs[i].Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	statuses := make([]int, wrong)
	retry := make([]string, wrong)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r, err := clients[i].http.Do(reqs[i])
			if err != nil {
				t.Errorf("attempt %d: %v", i, err)
				return
			}
			r.Body.Close()
			statuses[i], retry[i] = r.StatusCode, r.Header.Get("Retry-After")
		}(i)
	}
	close(start)
	wg.Wait()

	counts := map[int]int{}
	for i, s := range statuses {
		counts[s]++
		if s == http.StatusTooManyRequests {
			if n, err := strconv.Atoi(retry[i]); err != nil || n < 850 || n > 900 {
				t.Errorf("429 with Retry-After %q, want the seconds left of a 15 min lockout", retry[i])
			}
		}
	}
	if counts[http.StatusUnauthorized] != 5 || counts[http.StatusTooManyRequests] != wrong-5 {
		t.Errorf("39 parallel wrong attempts answered %v, want 5×401 and 34×429", counts)
	}

	right := b.client().login("alice", "correct horse battery")
	if right.Status != http.StatusTooManyRequests || right.Header.Get("Retry-After") == "" {
		t.Errorf("right password during the lockout: %d (Retry-After %q), want 429 with Retry-After",
			right.Status, right.Header.Get("Retry-After"))
	}
	checks := b.srv.ops.PasswordChecks()
	t.Logf("password checks: %d of %d attempts", checks, wrong+1)
	if checks > 5 {
		t.Errorf("password checks: %d of %d attempts, want ≤ 5", checks, wrong+1)
	}
	var sessions, lockouts int64
	b.db.Raw(`SELECT count(*) FROM sessions`).Scan(&sessions)
	b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = 'login.lockout'`).Scan(&lockouts)
	if sessions != 0 {
		t.Errorf("sessions created: %d, want 0", sessions)
	}
	if lockouts != 1 {
		t.Errorf("lockouts audited: %d, want 1 (one per lockout, not per refused attempt)", lockouts)
	}
}

// TestLogin_SuccessDoesNotCountAgainstAddress: attempts are counted before the check, but a
// success takes its count back off the address, so many good sign-ins from one office address
// never lock it (as before: the address counts failures).
func TestLogin_SuccessDoesNotCountAgainstAddress(t *testing.T) {
	b := setup(t) // UserLimit 3, IPLimit 6
	b.addOperator("alice", access.RoleViewer, "acme")
	for i := 0; i < 8; i++ {
		if got := b.client().login("alice", "correct horse battery"); got.Status != http.StatusSeeOther {
			t.Fatalf("sign-in %d: %d, want 303", i+1, got.Status)
		}
	}
}
