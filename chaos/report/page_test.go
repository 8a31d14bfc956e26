package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func draw(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := Draw(&b, r); err != nil {
		t.Fatalf("draw: %v", err)
	}
	return b.String()
}

// svgs returns each chart's SVG text.
func svgs(t *testing.T, html string) []string {
	t.Helper()
	out := regexp.MustCompile(`(?s)<svg class="chart".*?</svg>`).FindAllString(html, -1)
	if len(out) != 3 {
		t.Fatalf("want 3 charts, found %d", len(out))
	}
	return out
}

// section returns the text of the element with the given id up to its closing tag name.
func section(t *testing.T, html, id, closing string) string {
	t.Helper()
	i := strings.Index(html, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no element with id %s", id)
	}
	j := strings.Index(html[i:], closing)
	if j < 0 {
		t.Fatalf("element %s not closed by %s", id, closing)
	}
	return html[i : i+j]
}

// edgeReports are the shapes a page must draw: a long run with many faults, none at all,
// one sample, no faults, absurd figures, and a run that never saw a sample.
func edgeReports() map[string]*Report {
	one := synthetic(3, 1, 1)
	noFaults := synthetic(4, 60, 0)
	huge := synthetic(5, 30, 3)
	for i := range huge.Samples {
		huge.Samples[i].P99Ms = 1e300
		huge.Samples[i].ClaimsPerSec = 3e12
		huge.Samples[i].Errors = map[string]int{"5xx": math.MaxInt32}
	}
	huge.Totals.WorstP99Ms, huge.Totals.Requests = 1e300, math.MaxInt32
	manyKinds := synthetic(6, 40, 2)
	for i := range manyKinds.Samples {
		manyKinds.Samples[i].Errors = map[string]int{}
		for k := range 12 {
			manyKinds.Samples[i].Errors[string(rune('a'+k))+"-err"] = k + 1
		}
	}
	hostile := synthetic(7, 10, 2)
	hostile.Faults[0].Kind = `</text><image href="https://evil.example/x.png"/>`
	hostile.Faults[1].Target = `"><script src="//evil.example/x.js"></script>`
	hostile.Invariants[1].Violations = []string{`<img src=http://evil.example/x>`}
	hostile.Components[0].Why = `<link rel=stylesheet href="https://evil.example/x.css">`
	hostile.Samples[0].Errors = map[string]int{`<style>@import url(https://evil.example)</style>`: 1}
	return map[string]*Report{
		"hostile text":   hostile,
		"five minutes":   synthetic(1, 300, 24),
		"empty":          {},
		"no samples":     {Seed: 2, Duration: "1m0s", Faults: []Fault{{T: 10, Kind: "kill-service", Target: "payments-1"}}},
		"one sample":     one,
		"no faults":      noFaults,
		"huge values":    huge,
		"many err kinds": manyKinds,
	}
}

var (
	externalURL  = regexp.MustCompile(`(?i)^\s*([a-z][a-z0-9+.-]*:|//)`) // a scheme or a network path
	styleLoads   = regexp.MustCompile(`(?i)@import|url\(`)
	loadingTags  = []string{"script", "link", "img", "image", "iframe", "object", "embed", "video", "audio", "source", "use", "base", "form"}
	loadingAttrs = []string{"src", "href", "xlink:href", "action", "poster", "data", "srcset", "background"}
)

// externalRefs walks the page's elements (not its text, where escaped hostile input is
// harmless) and lists anything that would load from outside the file: a tag that loads, a
// link attribute with a scheme or a network path, an @import or url() in CSS.
func externalRefs(t *testing.T, html string) []string {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(html))
	dec.Strict, dec.AutoClose, dec.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	var refs []string
	inStyle := false
	for range 1_000_000 {
		tok, err := dec.Token()
		if err == io.EOF {
			return refs
		}
		if err != nil {
			t.Fatalf("the page does not tokenize: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			name := strings.ToLower(e.Name.Local)
			inStyle = name == "style"
			if slices.Contains(loadingTags, name) {
				refs = append(refs, "<"+name+">")
			}
			for _, a := range e.Attr {
				attr := strings.ToLower(a.Name.Local)
				if a.Name.Space != "" {
					attr = strings.ToLower(a.Name.Space) + ":" + attr
				}
				if slices.Contains(loadingAttrs, attr) && externalURL.MatchString(a.Value) {
					refs = append(refs, attr+"="+a.Value)
				}
				if attr == "style" && styleLoads.MatchString(a.Value) {
					refs = append(refs, "style="+a.Value)
				}
			}
		case xml.EndElement:
			inStyle = false
		case xml.CharData:
			if inStyle && styleLoads.Match(e) {
				refs = append(refs, "css: "+styleLoads.FindString(string(e)))
			}
		}
	}
	t.Fatal("the page has more than a million tokens")
	return nil
}

func TestPage_HasNoExternalReferences(t *testing.T) {
	for name, r := range edgeReports() {
		t.Run(name, func(t *testing.T) {
			html := draw(t, r)
			if refs := externalRefs(t, html); len(refs) > 0 {
				t.Errorf("the page refers outside itself: %q", refs)
			}
			if !strings.Contains(html, `content="default-src 'none'; style-src 'unsafe-inline'"`) {
				t.Error("the page lacks the policy that forbids loading anything")
			}
		})
	}
	// The check itself finds what it must.
	for _, bad := range []string{`<img src="x.png">`, `<a href="https://example.com">x</a>`, `<svg><image xlink:href="//cdn/x"/></svg>`,
		`<style>@import "x.css";</style>`, `<p style="background:url(x)">`, `<script>1</script>`} {
		if refs := externalRefs(t, "<html><body>"+bad+"</body></html>"); len(refs) == 0 {
			t.Errorf("externalRefs misses %s", bad)
		}
	}
}

func TestPage_OneMarkerPerFaultOnEveryChart(t *testing.T) {
	for _, n := range []int{0, 1, 24, 60} {
		r := synthetic(11, 300, n)
		html := draw(t, r)
		for i, svg := range svgs(t, html) {
			if got := strings.Count(svg, `class="fault-marker"`); got != n {
				t.Errorf("%d faults: chart %d has %d markers", n, i+1, got)
			}
		}
		if n == 0 {
			if !strings.Contains(html, "No fault was injected.") {
				t.Error("no faults: the page does not say so")
			}
			continue
		}
		if got := strings.Count(section(t, html, "faults", "</table>"), "<tr>") - 1; got != n {
			t.Errorf("%d faults: the faults table has %d rows", n, got)
		}
		for _, f := range r.Faults {
			if !strings.Contains(html, `data-kind="`+f.Kind+`"`) {
				t.Errorf("no marker of kind %s", f.Kind)
			}
		}
	}
}

func TestPage_InvariantsTableNamesEachViolation(t *testing.T) {
	r := synthetic(12, 120, 6)
	html := draw(t, r)
	table := section(t, html, "invariants", "</table>")
	for _, inv := range r.Invariants {
		if !strings.Contains(table, inv.Name) {
			t.Errorf("invariant %q is not in the table", inv.Name)
		}
		for _, v := range inv.Violations {
			if !strings.Contains(table, "<code>"+v+"</code>") {
				t.Errorf("violation %q is not listed", v)
			}
		}
	}
	if got := strings.Count(table, ">VIOLATED<"); got != 1 {
		t.Errorf("%d rows say VIOLATED, want 1", got)
	}
	if got := strings.Count(table, ">OK<"); got != 4 {
		t.Errorf("%d rows say OK, want 4", got)
	}
	if !strings.Contains(html, `<span class="headline failed">FAILED</span>`) {
		t.Error("a violated invariant without a FAILED headline")
	}
}

func TestPage_ViolationsListIsBounded(t *testing.T) {
	r := synthetic(13, 10, 1)
	r.Invariants[1].Violations = nil
	for i := range 250 {
		r.Invariants[1].Violations = append(r.Invariants[1].Violations, "key digest-"+strings.Repeat("x", i%5)+string(rune('A'+i%26)))
	}
	table := section(t, draw(t, r), "invariants", "</table>")
	if got := strings.Count(table, "<li><code>"); got != maxViolationsShown {
		t.Errorf("%d violations listed, want %d", got, maxViolationsShown)
	}
	if !strings.Contains(table, "… and 150 more (all in report.json)") {
		t.Error("the page does not say how many violations it left out")
	}
}

func TestPage_HeadlineSaysPassedOnlyWhenEveryInvariantHeld(t *testing.T) {
	held := synthetic(14, 30, 2)
	held.Invariants[1] = Invariant{Name: held.Invariants[1].Name, OK: true, Checked: 10}
	held.Passed = true
	lying := synthetic(15, 30, 2)
	lying.Passed = true // but an invariant is violated
	unchecked := synthetic(16, 30, 2)
	unchecked.Passed, unchecked.Invariants = true, nil
	for _, c := range []struct {
		name string
		r    *Report
		want string
	}{
		{"all held", held, "PASSED"},
		{"marked passed over a violation", lying, "FAILED"},
		{"nothing checked", unchecked, "FAILED"},
		{"failed", synthetic(17, 30, 2), "FAILED"},
	} {
		html := draw(t, c.r)
		if !strings.Contains(html, ">"+c.want+"</span></h1>") || !strings.HasPrefix(strings.SplitN(html, "<title>", 2)[1], c.want) {
			t.Errorf("%s: the headline and title do not say %s", c.name, c.want)
		}
	}
}

// TestPage_DrawsEdgeCases: every chart is well-formed SVG with a title and a description,
// no NaN or infinity reaches a coordinate, and the axes stay uncluttered.
func TestPage_DrawsEdgeCases(t *testing.T) {
	for name, r := range edgeReports() {
		t.Run(name, func(t *testing.T) {
			html := draw(t, r)
			for _, bad := range []string{"NaN", "Inf", "%!"} {
				if strings.Contains(html, bad) {
					t.Errorf("the page holds %q", bad)
				}
			}
			if m := regexp.MustCompile(`[0-9]{16,}`).FindString(html); m != "" {
				t.Errorf("the page writes a figure with %d digits", len(m))
			}
			for _, svg := range svgs(t, html) {
				var doc struct {
					Title string `xml:"title"`
					Desc  string `xml:"desc"`
				}
				if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
					t.Fatalf("chart is not well-formed: %v", err)
				}
				if doc.Title == "" || doc.Desc == "" {
					t.Errorf("chart without a title or description: %q %q", doc.Title, doc.Desc)
				}
				if n := strings.Count(svg, `text-anchor="middle"`); n < 2 || n > 10 {
					t.Errorf("%d time ticks", n)
				}
				if n := strings.Count(svg, `stroke="#eaeef2"`); n < 2 || n > 11 {
					t.Errorf("%d value ticks", n)
				}
				if !strings.Contains(svg, `role="img"`) || !strings.Contains(svg, `aria-labelledby=`) {
					t.Error("chart is not labelled for assistive technology")
				}
			}
			switch name {
			case "no samples", "empty":
				if strings.Count(html, "No samples were recorded.") != 3 {
					t.Error("charts without samples do not say so")
				}
			case "one sample":
				if !strings.Contains(html, "<circle") {
					t.Error("a lone sample is not drawn as a dot")
				}
			case "many err kinds":
				if got := strings.Count(svgs(t, html)[2], "<polyline"); got != maxErrLines {
					t.Errorf("%d error lines, want %d", got, maxErrLines)
				}
			}
		})
	}
}

func TestTicks_AreRound(t *testing.T) {
	for _, c := range []struct {
		max  float64
		want []string
	}{
		{1, []string{"0s", "1s"}},
		{60, []string{"0s", "10s", "20s", "30s", "40s", "50s", "1m"}},
		{300, []string{"0s", "1m", "2m", "3m", "4m", "5m"}},
		{330, []string{"0s", "1m", "2m", "3m", "4m", "5m"}},
		{3600, []string{"0s", "10m", "20m", "30m", "40m", "50m", "1h"}},
		{86400, []string{"0s", "4h", "8h", "12h", "16h", "20h", "24h"}},
	} {
		var got []string
		for _, tk := range timeTicks(timeAxis{max: c.max}) {
			got = append(got, tk.Label)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("time axis to %vs: ticks %v, want %v", c.max, got, c.want)
		}
	}
	for _, c := range []struct {
		max  float64
		want []string
	}{
		{0, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{7, []string{"0", "2", "4", "6", "8"}},
		{212, []string{"0", "50", "100", "150", "200", "250"}},
		{937.5, []string{"0", "200", "400", "600", "800", "1k"}},
		{1e300, []string{"0", "200T", "400T", "600T", "800T", "1000T"}},
	} {
		_, ts := niceValueAxis(c.max)
		var got []string
		for _, tk := range ts {
			got = append(got, tk.Label)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("value axis to %v: ticks %v, want %v", c.max, got, c.want)
		}
	}
}

func TestWrite_LeavesJSONAndPage_ReadGivesTheReportBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	r := synthetic(21, 90, 5)
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Error("the report read back differs from the one written")
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if string(html) != draw(t, back) {
		t.Error("the page drawn from the JSON differs from the one Write drew")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestRead_RefusesWhatIsNotAReport(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text, want string
	}{
		{"empty", "", "empty"},
		{"not json", "{seed: 1}", "invalid JSON at offset 2"},
		{"nul byte", "{\"seed\": 1,\x00 \"duration\": \"1m\"}", "NUL byte at offset 11"},
		{"escaped nul", `{"duration": "1m\u0000"}`, "duration: contains a NUL byte"},
		{"not utf-8", "{\"duration\": \"\xff\"}", "duration: is not valid UTF-8"},
		{"array", `[{"seed": 1}]`, "not a JSON object"},
		{"wrong type", `{"seed": "one"}`, "field seed"},
		{"two objects", `{"seed": 1} {"seed": 2}`, "text after the report"},
		{"missing", "", "no such file"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".json")
		if c.name != "missing" {
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Read(path)
		switch {
		case err == nil:
			t.Errorf("%s: read without error", c.name)
		case !errors.Is(err, ErrInvalid):
			t.Errorf("%s: %v is not ErrInvalid", c.name, err)
		case !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error %q, want one line saying %q", c.name, err, c.want)
		}
	}
}

func TestPage_LinesRunForwardInTimeWhateverTheSamplesOrder(t *testing.T) {
	r := synthetic(22, 60, 3)
	slices.Reverse(r.Samples)
	for _, svg := range svgs(t, draw(t, r)) {
		for _, pts := range regexp.MustCompile(`points="([^"]*)"`).FindAllStringSubmatch(svg, -1) {
			last := math.Inf(-1)
			for _, p := range strings.Fields(pts[1]) {
				x, err := strconv.ParseFloat(strings.SplitN(p, ",", 2)[0], 64)
				if err != nil || x < last {
					t.Fatalf("a line doubles back (or a bad point %q)", p)
				}
				last = x
			}
		}
	}
}

func TestPage_ShadesEachStretchWithoutASuccessfulClaim(t *testing.T) {
	r := synthetic(23, 20, 0)
	for _, i := range []int{3, 4, 5, 12, 19} { // three stretches: 3s–6s, 12s–13s, 19s to the end
		r.Samples[i].ClaimsPerSec = 0
	}
	claims := svgs(t, draw(t, r))[0]
	for _, want := range []string{"from 3s to 6s (3 s)", "from 12s to 13s (1 s)", "from 19s to 20s (1 s)"} {
		if !strings.Contains(claims, "<title>no successful claim "+want+"</title>") {
			t.Errorf("no shaded stretch %s", want)
		}
	}
	if got := strings.Count(claims, `class="outage"`); got != 3 {
		t.Errorf("%d stretches shaded, want 3", got)
	}
}

func TestPage_ShowsTheLinearizabilityVerdictAndFailsOnAnIllegalHistory(t *testing.T) {
	held := func(seed int64) *Report {
		r := synthetic(seed, 30, 2)
		for i := range r.Invariants {
			r.Invariants[i].OK, r.Invariants[i].Violations = true, nil
		}
		r.Passed = true
		r.Paths = map[string]int{"http": 120, "grpc": 0}
		return r
	}
	ok := held(18)
	ok.Linearizability = &Linearizability{Checker: "porcupine", Operations: 1234, Partitions: 400, Result: LinearizableOK, CheckSeconds: 0.4}
	html := draw(t, ok)
	lin := section(t, html, "linearizability", "</table>")
	if !strings.Contains(html, ">PASSED</span></h1>") || !strings.Contains(lin, "porcupine") || !strings.Contains(lin, ">1234<") ||
		!strings.Contains(lin, ">ok<") {
		t.Fatalf("an ok history: the page does not show it passed with porcupine over 1234 operations:\n%s", lin)
	}
	paths := section(t, html, "paths", "</table>")
	if !strings.Contains(paths, "<td>grpc</td><td class=\"num\">0</td>") || !strings.Contains(paths, `class="violated"`) {
		t.Fatalf("a path walked zero times is not marked:\n%s", paths)
	}

	bad := held(19)
	bad.Linearizability = &Linearizability{Checker: "porcupine", Operations: 9, Partitions: 3, Result: "illegal",
		Keys: []string{"http|acme|chaos-1"}, Visualization: "linearizability.html"}
	html = draw(t, bad)
	if !strings.Contains(html, ">FAILED</span></h1>") || !strings.Contains(html, `href="linearizability.html"`) ||
		!strings.Contains(html, "http|acme|chaos-1") {
		t.Fatal("an illegal history: the page must say FAILED, name the key and link Porcupine's visualisation")
	}
}

// A run with cells lists its cells and checks every invariant in each: the table gets a cell
// column naming each row's cell, and a violation in one cell fails the page. A run without
// cells has no such column.
func TestPage_InvariantsOfARunWithCellsArePerCell(t *testing.T) {
	plain := section(t, draw(t, synthetic(21, 30, 2)), "invariants", "</table>")
	if strings.Contains(plain, `<th scope="col">Cell</th>`) || strings.Contains(plain, `class="cell"`) {
		t.Error("a run without cells shows a cell column")
	}
	r := synthetic(21, 30, 2)
	r.Cells = []Cell{{Name: "a", Tenants: []string{"acme"}, Requests: 400, Answered2xx: 310, LongestUnavailableS: 1.2},
		{Name: "b", Tenants: []string{"globex"}, Requests: 380, Answered2xx: 250, LongestUnavailableS: 6.5}}
	var invs []Invariant
	for _, cell := range []string{"a", "b"} {
		for _, inv := range r.Invariants {
			inv.Cell, inv.OK, inv.Violations = cell, true, nil
			invs = append(invs, inv)
		}
	}
	invs[len(invs)-1].OK, invs[len(invs)-1].Violations = false, []string{"digest-in-cell-b"}
	r.Invariants = invs
	html := draw(t, r)
	if !strings.Contains(html, "cells a (acme), b (globex)") {
		t.Error("the page does not name the cells and their tenants")
	}
	totals := section(t, html, "h-totals", "</table>")
	for _, want := range []string{"<td>Cell a (acme)</td><td class=\"num\">400 requests, 310 2xx</td>", "<td class=\"sub\">longest unavailability</td><td class=\"num\">1.2 s</td>",
		"<td>Cell b (globex)</td><td class=\"num\">380 requests, 250 2xx</td>", "<td class=\"num\">6.5 s</td>"} {
		if !strings.Contains(totals, want) {
			t.Errorf("the totals lack %s", want)
		}
	}
	table := section(t, html, "invariants", "</table>")
	if !strings.Contains(table, `<th scope="col">Cell</th>`) {
		t.Fatal("no cell column")
	}
	rows := regexp.MustCompile(`(?s)<tr class="(ok|violated)">\s*<td class="cell">([a-z]+)</td>`).FindAllStringSubmatch(table, -1)
	if len(rows) != len(invs) {
		t.Fatalf("%d rows name a cell, want %d", len(rows), len(invs))
	}
	for i, m := range rows {
		if m[2] != invs[i].Cell || (m[1] == "ok") != invs[i].OK {
			t.Errorf("row %d: cell %s %s, want cell %s ok=%v", i, m[2], m[1], invs[i].Cell, invs[i].OK)
		}
	}
	if !strings.Contains(html, `<span class="headline failed">FAILED</span>`) {
		t.Error("a violation in cell b without a FAILED headline")
	}
}
