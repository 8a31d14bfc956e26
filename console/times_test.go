package console

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/pagecheck"
)

// TestTimeZoneSwitch: pages show times as "2006-01-02 15:04:05 UTC" with how long ago beside
// them; an operator who picks Asia/Shanghai sees the same moments as "… UTC+08:00" (never the
// ambiguous "CST"), on every later request and in a new session; a zone that is not one is a 400
// naming time_zone and changes nothing.
func TestTimeZoneSwitch(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	k := b.seedKey("acme", "payment.charge", "tz-1", `{"amount":100,"currency":"USD"}`, true)
	page := "/keys/" + strconv.FormatInt(k.ID, 10)
	c := b.signIn("a")

	utc := regexp.MustCompile(`<time datetime="[0-9T:+Z-]+" class="at">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time> <span class="muted ago">\d+ (ms|s|min) ago</span>`)
	r := c.get(page)
	if r.Status != 200 || !utc.MatchString(r.Body) {
		t.Fatalf("key page: %d, no UTC time with a relative part:\n%s", r.Status, r.Body)
	}
	created := k.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC")
	if !strings.Contains(r.Body, created) {
		t.Fatalf("key page lacks the created time %q", created)
	}

	r = c.post("/settings/time-zone", map[string][]string{"time_zone": {"Mars/Olympus"}}, true)
	if r.Status != 400 || !strings.Contains(r.Body, "time_zone") {
		t.Fatalf("bad zone: %d %s", r.Status, r.Body)
	}
	if r = c.get(page); !strings.Contains(r.Body, created) {
		t.Fatal("a refused zone changed what the page shows")
	}

	r = c.post("/settings/time-zone", map[string][]string{"time_zone": {"Asia/Shanghai"}}, true)
	if r.Status != 303 {
		t.Fatalf("set zone: %d %s", r.Status, r.Body)
	}
	sh, _ := time.LoadLocation("Asia/Shanghai")
	local := k.CreatedAt.In(sh).Format("2006-01-02 15:04:05") + " UTC+08:00"
	cst := regexp.MustCompile(`\d\d:\d\d:\d\d UTC\+08:00</time> <span class="muted ago">\d+ (ms|s|min) ago</span>`)
	for i, cl := range []*client{c, c, b.signIn("a")} { // later requests, then a new session
		r = cl.get(page)
		if r.Status != 200 || !strings.Contains(r.Body, local) || !cst.MatchString(r.Body) || utc.MatchString(r.Body) {
			t.Fatalf("request %d after choosing Asia/Shanghai: %d, want %q and no UTC times", i, r.Status, local)
		}
		if !strings.Contains(r.Body, `value="Asia/Shanghai"`) {
			t.Fatalf("request %d: the header form does not show the chosen zone", i)
		}
	}
	var n int64
	b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = 'operator.time_zone' AND actor = 'operator:a' AND target = 'operator:a'`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d audit entries for the zone change, want 1", n)
	}
}

// TestTimeFormatsOnPages: no page prints Go's default time format ("… +0000 UTC") or a raw
// database timestamp; every page with times prints them in the console's one format, and
// pagecheck finds no time written another way, in both languages, in UTC and Asia/Shanghai.
func TestTimeFormatsOnPages(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	k := b.seedKey("acme", "payment.charge", "tz-2", `{"amount":100,"currency":"USD"}`, true)
	b.seedReconJob("daily")
	c := b.signIn("a") // signing in records a last login: the operators page shows it
	goDefault := regexp.MustCompile(`\d\d:\d\d:\d\d(\.\d+)? [+-]\d{4}|\+0000 UTC| m=[+-]`)
	ours := regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC(</time>|")`)
	pages := []string{"/", "/keys", "/keys/" + strconv.FormatInt(k.ID, 10), "/jobs", "/consumers",
		"/reconcile", "/reconcile/jobs/daily", "/retention", "/audit", "/admin/operators", "/replays"}
	for _, p := range pages {
		r := c.get(p)
		if r.Status != 200 {
			t.Fatalf("%s: %d", p, r.Status)
		}
		if m := goDefault.FindString(r.Body); m != "" {
			t.Errorf("%s prints a raw time: %q", p, m)
		}
		if p != "/" && p != "/jobs" && p != "/consumers" && p != "/retention" && p != "/replays" && !ours.MatchString(r.Body) {
			t.Errorf("%s shows no time in the console's format", p)
		}
	}
	for _, zone := range []string{"Asia/Shanghai", "UTC"} {
		if r := c.post("/settings/time-zone", map[string][]string{"time_zone": {zone}}, true); r.Status != 303 {
			t.Fatalf("zone %s: %d", zone, r.Status)
		}
		loc, _ := time.LoadLocation(zone)
		for _, lang := range []string{"zh-CN", "en"} {
			if r := c.post("/settings/language", map[string][]string{"lang": {lang}}, true); r.Status != 303 {
				t.Fatalf("language %s: %d", lang, r.Status)
			}
			check := pagecheck.Times{Lang: lang, Zone: loc}
			for _, p := range pages {
				for _, problem := range check.Check(c.get(p).Body) {
					t.Errorf("%s [%s, %s]: %s", p, lang, zone, problem)
				}
			}
		}
	}
}
