package pagecheck

import (
	"strings"
	"testing"
	"time"
)

// The checks find what the issue found on the pages: an unlabelled UTC timestamp in another
// format, a zone abbreviation, a Go duration, a relative time that disagrees with the clock,
// and English words on a Chinese page.
func TestTimes_FindsEveryOtherFormat(t *testing.T) {
	sh, _ := time.LoadLocation("Asia/Shanghai")
	now := time.Date(2026, 12, 4, 18, 42, 17, 0, time.UTC)
	c := Times{Lang: "en", Zone: sh, Now: now}
	for page, want := range map[string]string{
		`<td>2026-12-04 18:42:17.911</td>`:                                     "a date written by hand",
		`<time datetime="2026-12-04T18:42:16Z">2026-12-05 02:42:16 CST</time>`: "neither an absolute",
		`<p>2026-12-05 02:42:16 UTC</p>`:                                       "names the zone UTC",
		`<p>a second check a quarantine (10s) later</p>`:                       "a Go duration",
		`<p>keep 30d</p>`: "a period",
		`<time datetime="2026-12-04T18:40:17Z">5 min ago</time>`:                                 `"5 min ago" for a moment`,
		`<time datetime="2026-12-04T18:40:17Z" title="2026-12-04 18:40:17 UTC">2 min ago</time>`: "title",
		`<span class="duration">01:30:00</span>`:                                                 "not in the en style",
		`<time>5 min ago</time>`:                                                                 "has no datetime",
	} {
		got := strings.Join(c.Check(page), "\n")
		if !strings.Contains(got, want) {
			t.Errorf("%s: got %q, want a problem saying %q", page, got, want)
		}
	}
	for _, ok := range []string{
		`<time datetime="2026-12-04T18:42:16Z" class="at">2026-12-05 02:42:16 UTC+08:00</time> <span>1 s ago</span>`,
		`<time datetime="2026-12-04T18:40:17Z" title="2026-12-05 02:40:17 UTC+08:00">2 min ago</time>`,
		`<p>order-2026-12-04-0042 <code>2026-12-04 18:42:17.911</code> took 2 min 5 s</p>`,
	} {
		if got := c.Check(ok); len(got) != 0 {
			t.Errorf("%s: %q", ok, got)
		}
	}
	zh := Times{Lang: "zh-CN", Zone: sh, Now: now}
	if got := zh.Check(`<p>耗时 5 s</p>`); len(got) == 0 {
		t.Error("an English unit on a Chinese page passed")
	}
}

func TestLatin_FindsEnglishOutsideCode(t *testing.T) {
	got := Latin(`<p>次数 Times <code>downstream_not_found</code> <span class="mono">acme</span> <span translate="no">globex</span>
		<button title="Copy it">复制</button> UTC</p>`, map[string]bool{"UTC": true})
	want := []string{`"Times" in text`, `"Copy" in <button title=`, `"it" in <button title=`}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %d problems", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], w)
		}
	}
}
