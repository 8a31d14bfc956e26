// Package pagecheck reads rendered console pages the way an operator does and reports what a
// page must not show: a time that is not written the console's one way (Times), and, on a
// Chinese page, an English word outside code (Latin). Both the templates' tests (every
// component, fixed data) and the console's (every page, a real database) use it. It knows the
// formats from the console's documentation (docs/CONSOLE.md), not from the templates' code, so
// it checks them rather than repeating them.
package pagecheck

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/html"
)

// codeTags hold code, data or machine text: nothing inside them is read as words.
var codeTags = map[string]bool{"code": true, "pre": true, "kbd": true, "samp": true, "var": true, "script": true,
	"style": true, "textarea": true}

// readAttrs are the attributes people read or hear.
var readAttrs = []string{"title", "aria-label", "alt"}

// isCode says whether n marks its content as code or data that is not to be translated: a code
// element, translate="no", or the monospaced class.
func isCode(n *html.Node) bool {
	if n.Type != html.ElementNode {
		return false
	}
	if codeTags[n.Data] {
		return true
	}
	for _, a := range n.Attr {
		if a.Key == "translate" && a.Val == "no" {
			return true
		}
		if a.Key == "class" && hasClass(a.Val, "mono") {
			return true
		}
	}
	return false
}

func hasClass(list, c string) bool {
	for _, f := range strings.Fields(list) {
		if f == c {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// Times is how one page's times must read: its language ("en" or "zh-CN"), the operator's
// zone, and the present the page was rendered at (zero: relative times are checked for their
// shape only).
type Times struct {
	Lang string
	Zone *time.Location
	Now  time.Time
}

func (c Times) zh() bool { return c.Lang == "zh-CN" }

var (
	zoneSuffix  = `(?:UTC[+-]\d\d:\d\d|UTC)`
	absEn       = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (` + zoneSuffix + `)$`)
	absZh       = regexp.MustCompile(`^(\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d) (` + zoneSuffix + `)$`)
	absEnIn     = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ` + zoneSuffix)
	absZhIn     = regexp.MustCompile(`\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d ` + zoneSuffix)
	clockRe     = regexp.MustCompile(`^(\d\d:\d\d) (` + zoneSuffix + `)$`)
	clockIn     = regexp.MustCompile(`\b\d\d:\d\d ` + zoneSuffix)
	relEn       = regexp.MustCompile(`^(?:(\d+) (ms|s|min|h|d) ago|in (\d+) (ms|s|min|h|d)|overdue by (\d+) (ms|s|min|h|d))$`)
	relZh       = regexp.MustCompile(`^(?:(\d+) (毫秒|秒|分钟|小时|天)前|(\d+) (毫秒|秒|分钟|小时|天)后|已逾期 (\d+) (毫秒|秒|分钟|小时|天))$`)
	durEn       = regexp.MustCompile(`^\d+ (?:ms|s|min|h|d)(?: \d+ (?:ms|s|min|h|d))?$`)
	durZh       = regexp.MustCompile(`^\d+ (?:毫秒|秒|分钟|小时|天)(?: \d+ (?:毫秒|秒|分钟|小时|天))?$`)
	dayEn       = regexp.MustCompile(`^\d{4}-\d\d-\d\d$`)
	dayZh       = regexp.MustCompile(`^\d{4}年\d{1,2}月\d{1,2}日$`)
	unitsEn     = map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	unitsZh     = map[string]time.Duration{"毫秒": time.Millisecond, "秒": time.Second, "分钟": time.Minute, "小时": time.Hour, "天": 24 * time.Hour}
	forbiddenIn = []struct {
		re   *regexp.Regexp
		what string
	}{
		{regexp.MustCompile(`(?:^|[^\w-])\d{4}-\d{1,2}-\d{1,2}(?:$|[^\w-])`), "a date written by hand"},
		{regexp.MustCompile(`\d{4}年\d{1,2}月`), "a date written by hand"},
		{regexp.MustCompile(`(?:^|[^\w:-])\d{1,2}:\d\d(?::\d\d)?(?:$|[^\w:-])`), "a time of day written by hand"},
		{regexp.MustCompile(`\b(?:CST|CDT|EST|EDT|PST|PDT|MST|MDT|CET|CEST|BST|IST|JST|KST|HKT|GMT|AEST|AEDT)\b`), "a zone abbreviation"},
		{regexp.MustCompile(`(?:^|[^\w.])\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h)(?:\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))*(?:$|[^\w.])`), "a Go duration"},
		{regexp.MustCompile(`(?:^|[^\w.])\d+d(?:$|[^\w.])`), "a period written as input (\"30d\")"},
	}
	enUnitInZh = regexp.MustCompile(`\d+ (?:ms|s|sec|min|h|d)\b`)
	zhUnitInEn = regexp.MustCompile(`\d+ ?(?:毫秒|秒|分钟|小时|天)`)
)

// Check reports every time on page that is not in the console's format for c: each <time>
// element must carry a datetime and read, in c's language and zone, as an absolute moment, a
// relative one, a time of day, a calendar day or (title) the absolute moment on hover, each
// agreeing with its datetime; text and readable attributes outside <time> and code may hold a
// complete absolute moment or a duration in the language's style, and nothing else that looks
// like a date, a time of day, a zone abbreviation or a Go duration.
func (c Times) Check(page string) []string {
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		return []string{"not HTML: " + err.Error()}
	}
	var out []string
	var walk func(n *html.Node, code bool)
	walk = func(n *html.Node, code bool) {
		if n.Type == html.ElementNode && n.Data == "time" {
			out = append(out, c.checkTimeElement(n)...)
			return
		}
		code = code || isCode(n)
		if n.Type == html.ElementNode && !code {
			for _, k := range readAttrs {
				if v, ok := attr(n, k); ok {
					out = append(out, c.checkText(fmt.Sprintf("<%s %s=%q>", n.Data, k, v), v)...)
				}
			}
			if hasClassOf(n, "duration") {
				if s := textOf(n); !c.durRe().MatchString(s) {
					out = append(out, fmt.Sprintf("duration %q is not in the %s style", s, c.Lang))
				}
				return
			}
		}
		if n.Type == html.TextNode && !code {
			out = append(out, c.checkText(fmt.Sprintf("text %q", clip(n.Data)), n.Data)...)
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch, code)
		}
	}
	walk(doc, false)
	return out
}

func hasClassOf(n *html.Node, c string) bool {
	v, _ := attr(n, "class")
	return hasClass(v, c)
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func (c Times) durRe() *regexp.Regexp {
	if c.zh() {
		return durZh
	}
	return durEn
}

// checkText accepts complete absolute moments and times of day in c's format (their zone
// checked), then refuses anything else that looks like a time.
func (c Times) checkText(where, s string) []string {
	var out []string
	abs, absIn := absEnIn, absEn
	if c.zh() {
		abs, absIn = absZhIn, absZh
	}
	s = abs.ReplaceAllStringFunc(s, func(m string) string {
		if err := c.absolute(absIn, m, nil); err != "" {
			out = append(out, where+": "+err)
		}
		return " "
	})
	s = clockIn.ReplaceAllStringFunc(s, func(m string) string {
		if err := c.clock(m, nil); err != "" {
			out = append(out, where+": "+err)
		}
		return " "
	})
	for _, f := range forbiddenIn {
		if m := f.re.FindString(s); m != "" {
			out = append(out, fmt.Sprintf("%s: %s (%q)", where, f.what, strings.TrimSpace(m)))
		}
	}
	if c.zh() {
		if m := enUnitInZh.FindString(s); m != "" {
			out = append(out, fmt.Sprintf("%s: an English duration unit on a Chinese page (%q)", where, m))
		}
	} else if m := zhUnitInEn.FindString(s); m != "" {
		out = append(out, fmt.Sprintf("%s: a Chinese duration unit on an English page (%q)", where, m))
	}
	return out
}

// checkTimeElement checks one <time>: its datetime, its text and its title.
func (c Times) checkTimeElement(n *html.Node) []string {
	dt, ok := attr(n, "datetime")
	s := textOf(n)
	if !ok {
		return []string{fmt.Sprintf("<time>%s</time> has no datetime", s)}
	}
	if d, err := time.Parse("2006-01-02", dt); err == nil {
		want := dayEn
		if c.zh() {
			want = dayZh
		}
		if !want.MatchString(s) {
			return []string{fmt.Sprintf("day %s reads %q, not the %s day format", dt, s, c.Lang)}
		}
		if c.zh() && s != fmt.Sprintf("%d年%d月%d日", d.Year(), d.Month(), d.Day()) || !c.zh() && s != dt {
			return []string{fmt.Sprintf("day %s reads %q", dt, s)}
		}
		return nil
	}
	at, err := time.Parse(time.RFC3339, dt)
	if err != nil {
		return []string{fmt.Sprintf("<time datetime=%q>: not RFC 3339", dt)}
	}
	var out []string
	if title, ok := attr(n, "title"); ok {
		re := absEn
		if c.zh() {
			re = absZh
		}
		if e := c.absolute(re, title, &at); e != "" {
			out = append(out, "title: "+e)
		}
	}
	re := absEn
	if c.zh() {
		re = absZh
	}
	switch {
	case re.MatchString(s):
		if e := c.absolute(re, s, &at); e != "" {
			out = append(out, e)
		}
	case clockRe.MatchString(s):
		if e := c.clock(s, &at); e != "" {
			out = append(out, e)
		}
	default:
		if e := c.relative(s, at); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// absolute checks one absolute moment: its zone is c's zone's offset at that moment, and, when
// want is set, it is that moment.
func (c Times) absolute(re *regexp.Regexp, s string, want *time.Time) string {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return fmt.Sprintf("%q is not an absolute time in the %s format", s, c.Lang)
	}
	layout := "2006-01-02 15:04:05"
	if c.zh() {
		layout = "2006年1月2日 15:04:05"
	}
	local, err := time.ParseInLocation(layout, m[1], c.Zone)
	if err != nil {
		return fmt.Sprintf("%q: %v", s, err)
	}
	if got, wantZone := m[2], suffix(local); got != wantZone {
		return fmt.Sprintf("%q names the zone %s; the operator's zone %s is %s then", s, got, c.Zone, wantZone)
	}
	if want != nil && !local.Equal(want.Truncate(time.Second)) {
		return fmt.Sprintf("%q is not its datetime %s", s, want.UTC().Format(time.RFC3339))
	}
	return ""
}

func (c Times) clock(s string, want *time.Time) string {
	m := clockRe.FindStringSubmatch(s)
	if m == nil {
		return fmt.Sprintf("%q is not a time of day", s)
	}
	if want != nil {
		in := want.In(c.Zone)
		if m[1] != in.Format("15:04") || m[2] != suffix(in) {
			return fmt.Sprintf("%q is not %s in %s", s, want.UTC().Format(time.RFC3339), c.Zone)
		}
	}
	return ""
}

// relative checks "5 min ago" / "in 5 min" / "overdue by 5 min" (or the Chinese) against the
// present: the number is the whole count of the largest unit that fits.
func (c Times) relative(s string, at time.Time) string {
	re, units := relEn, unitsEn
	if c.zh() {
		re, units = relZh, unitsZh
	}
	m := re.FindStringSubmatch(s)
	if m == nil {
		return fmt.Sprintf("<time> reads %q: neither an absolute, a relative nor a clock time in the %s format", s, c.Lang)
	}
	if c.Now.IsZero() {
		return ""
	}
	var num, unit string
	past := false
	switch {
	case m[1] != "":
		num, unit, past = m[1], m[2], true
	case m[3] != "":
		num, unit = m[3], m[4]
	default:
		num, unit, past = m[5], m[6], true
	}
	d := c.Now.Sub(at)
	if !past {
		d = -d
	}
	if d < 0 {
		return fmt.Sprintf("%q points the wrong way: the moment is %s from now", s, at.Sub(c.Now))
	}
	// A datetime keeps whole seconds: the moment lies within a second after it.
	n, _ := strconv.ParseInt(num, 10, 64)
	for _, d := range []time.Duration{d, d - time.Second + 1, d + time.Second - 1} {
		if d >= 0 && units[unit] == largest(d) && n == int64(d/largest(d)) {
			return ""
		}
	}
	return fmt.Sprintf("%q for a moment %s away", s, d)
}

// largest is the unit a relative time uses for d: the largest that fits, hours up to two days.
func largest(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return time.Millisecond
	case d < time.Minute:
		return time.Second
	case d < time.Hour:
		return time.Minute
	case d < 48*time.Hour:
		return time.Hour
	}
	return 24 * time.Hour
}

func suffix(t time.Time) string {
	_, off := t.Zone()
	if off == 0 {
		return "UTC"
	}
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("UTC%c%02d:%02d", sign, off/3600, off%3600/60)
}

// Latin reports every English word on a Chinese page outside code: in text and in the
// attributes people read (title, aria-label, alt, placeholder). A word is a run of Latin
// letters; it passes when allow holds it (proper names, units such as UTC), or when it sits
// inside code, data marked translate="no" or the monospaced class. Each problem names the word
// and the text around it.
func Latin(page string, allow map[string]bool) []string {
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		return []string{"not HTML: " + err.Error()}
	}
	var out []string
	seen := map[string]bool{}
	report := func(where, s string, attribute bool) {
		if attribute {
			// An attribute cannot mark data inside it: a token with a digit or an identifier's
			// punctuation in it (a key, an id, a job's name) is taken for data there.
			var words []string
			for _, f := range strings.Fields(s) {
				if !strings.ContainsAny(f, "0123456789-_.:/@") {
					words = append(words, f)
				}
			}
			s = strings.Join(words, " ")
		}
		for _, w := range latinWords(s) {
			if allow[w] {
				continue
			}
			p := fmt.Sprintf("%q in %s", w, where)
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	var walk func(n *html.Node, code bool)
	walk = func(n *html.Node, code bool) {
		// Code, and text said to be in another language (the switch names English in English).
		code = code || isCode(n) || n.Type == html.ElementNode && otherLanguage(n)
		if n.Type == html.ElementNode && !code {
			for _, k := range append(readAttrs, "placeholder") {
				if v, ok := attr(n, k); ok && !(k == "placeholder" && exampleValue(v)) {
					report(fmt.Sprintf("<%s %s=%q>", n.Data, k, clip(v)), v, true)
				}
			}
		}
		if n.Type == html.TextNode && !code {
			// A title holds no markup: its data (a job's name) is taken as in an attribute.
			title := n.Parent != nil && n.Parent.Type == html.ElementNode && n.Parent.Data == "title"
			report(fmt.Sprintf("text %q", clip(n.Data)), n.Data, title)
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch, code)
		}
	}
	walk(doc, false)
	return out
}

func otherLanguage(n *html.Node) bool {
	lang, ok := attr(n, "lang")
	return ok && !strings.HasPrefix(lang, "zh")
}

// exampleValue is a placeholder that shows a value's syntax rather than words: "key:42",
// "payment.charge", "72h".
func exampleValue(s string) bool {
	return !strings.ContainsAny(s, " ") && strings.ContainsAny(s, ":._/*0123456789…@,")
}

func latinWords(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return !(r < unicode.MaxASCII && unicode.IsLetter(r)) }) {
		out = append(out, f)
	}
	return out
}

// Text is what a reader of page sees as one line: its text without tags, entities decoded,
// no-break spaces as spaces and runs of white space as one space (scripts and styles left out).
// Tests look for a sentence in it however the page marks its parts up (a datum wrapped in
// translate="no", an amount in its money span).
func Text(page string) string {
	z := html.NewTokenizer(strings.NewReader(page))
	var b strings.Builder
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.Join(strings.Fields(strings.ReplaceAll(b.String(), "\u00a0", " ")), " ")
		case html.TextToken:
			if skip == 0 {
				b.Write(z.Text())
			}
		case html.StartTagToken:
			if name, _ := z.TagName(); string(name) == "script" || string(name) == "style" {
				skip++
			} else if blockTags[string(name)] {
				b.WriteByte(' ')
			}
		case html.EndTagToken:
			if name, _ := z.TagName(); string(name) == "script" || string(name) == "style" {
				skip--
			} else if blockTags[string(name)] {
				b.WriteByte(' ')
			}
		}
	}
}

// blockTags end a run of text: their neighbours' words do not join.
var blockTags = map[string]bool{"p": true, "div": true, "td": true, "th": true, "tr": true, "li": true, "dt": true, "dd": true,
	"h1": true, "h2": true, "h3": true, "section": true, "br": true, "summary": true, "option": true, "label": true}
