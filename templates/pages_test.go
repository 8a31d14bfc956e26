package templates

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/internal/testinfra/pagecheck"
	"github.com/idemops/idemops/money"
)

// fixedNow is the moment the fixtures are rendered at.
var fixedNow = time.Date(2026, 12, 4, 18, 42, 17, 911_000_000, time.UTC)

// Every exported component has a fixture, so the page tests below reach every template.
func TestFixtures_CoverEveryComponent(t *testing.T) {
	fx := fixtures(fixedNow)
	decl := regexp.MustCompile(`(?m)^templ ([A-Z]\w*)\(`)
	files, _ := filepath.Glob("*.templ")
	found := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			found++
			if _, ok := fx[m[1]]; !ok {
				t.Errorf("%s: component %s has no fixture in fixtures_test.go", f, m[1])
			}
		}
	}
	if found < 40 {
		t.Fatalf("found only %d components; the scan is broken", found)
	}
}

// render renders a fixture in lang and zone at fixedNow.
func render(t *testing.T, name string, lang string, zone *time.Location) string {
	t.Helper()
	ctx := WithClock(WithZone(WithLang(context.Background(), lang), zone), func() time.Time { return fixedNow })
	var b strings.Builder
	if err := fixtures(fixedNow)[name].Render(ctx, &b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b.String()
}

func fixtureNames() []string {
	var names []string
	for n := range fixtures(fixedNow) {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Every template writes every time the one way, at a fixed clock, in both languages and in
// zones east and west of UTC: pagecheck.Times fails a time written by hand, a zone
// abbreviation, a relative time that disagrees with the clock or a duration in another style.
func TestPages_WriteEveryTimeOneWay(t *testing.T) {
	for _, zone := range []string{"UTC", "Asia/Shanghai", "America/New_York"} {
		loc, err := LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, lang := range Langs {
			check := pagecheck.Times{Lang: lang, Zone: loc, Now: fixedNow}
			for _, name := range fixtureNames() {
				for _, problem := range check.Check(render(t, name, lang, loc)) {
					t.Errorf("%s [%s, %s]: %s", name, lang, zone, problem)
				}
			}
		}
	}
}

// The formats themselves, written out.
func TestTimeFormats_OnePerLanguage(t *testing.T) {
	sh, _ := LoadZone("Asia/Shanghai")
	ny, _ := LoadZone("America/New_York")
	at := time.Date(2026, 12, 4, 18, 42, 16, 0, time.UTC)
	ctx := func(lang string, zone *time.Location) context.Context {
		return WithClock(WithZone(WithLang(context.Background(), lang), zone), func() time.Time { return at.Add(90 * time.Second) })
	}
	for _, c := range []struct{ got, want string }{
		{whenIn(ctx(LangEnglish, time.UTC), at), "2026-12-04 18:42:16 UTC"},
		{whenIn(ctx(LangEnglish, sh), at), "2026-12-05 02:42:16 UTC+08:00"},
		{whenIn(ctx(LangChinese, sh), at), "2026年12月5日 02:42:16 UTC+08:00"},
		{whenIn(ctx(LangEnglish, ny), at), "2026-12-04 13:42:16 UTC-05:00"},
		{clockIn(ctx(LangEnglish, sh), at), "02:42 UTC+08:00"},
		{ago(ctx(LangEnglish, sh), at), "1 min ago"},
		{ago(ctx(LangChinese, sh), at), "1 分钟前"},
		{until(ctx(LangEnglish, sh), at.Add(time.Hour)), "in 58 min"},
		{until(ctx(LangEnglish, sh), at), "overdue by 1 min"},
		{until(ctx(LangChinese, sh), at), "已逾期 1 分钟"},
		{duration(ctx(LangEnglish, sh), 2*time.Minute+5*time.Second), "2 min 5 s"},
		{duration(ctx(LangChinese, sh), 90*time.Minute), "1 小时 30 分钟"},
		{duration(ctx(LangEnglish, sh), 350*time.Millisecond), "350 ms"},
		{duration(ctx(LangEnglish, sh), 30*24*time.Hour), "30 d"},
		{duration(ctx(LangEnglish, sh), 36*time.Hour), "36 h"},
		{duration(ctx(LangEnglish, sh), 72*time.Hour+time.Minute), "3 d"},
		{span(ctx(LangEnglish, sh), 90*time.Second), "1 min"},
		{dayText(ctx(LangChinese, sh), "2026-12-03"), "2026年12月3日"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// LatinAllowed are the Latin words a Chinese page may show outside code: the product's name,
// proper names of channels and standards, units and abbreviations written the same in Chinese.
var LatinAllowed = map[string]bool{"idemops": true, "UTC": true, "HTTP": true, "API": true, "SSO": true, "ISO": true,
	"JSON": true, "CSV": true, "URL": true, "PID": true, "IANA": true, "Stripe": true, "Adyen": true, "MiB": true, "ID": true,
	"IP": true, "CSRF": true, "OK": true, "Excel": true}

func init() {
	for _, c := range money.Codes() {
		LatinAllowed[c] = true // a currency's code is kept with its amount in every language
	}
}

// Every template in Chinese, with its fixture's data, shows no English word outside code, data
// marked as such, and the allow-list.
func TestPages_ChineseHasNoEnglishOutsideCode(t *testing.T) {
	for _, name := range fixtureNames() {
		for _, problem := range pagecheck.Latin(render(t, name, LangChinese, time.UTC), LatinAllowed) {
			t.Errorf("%s: %s", name, problem)
		}
	}
}
