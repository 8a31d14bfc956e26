package report

import (
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed page.html.tmpl
var pageSource string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"secs":  func(t float64) string { return strconv.FormatFloat(t, 'f', 1, 64) + " s" },
	"value": formatValue,
	"count": count,
}).Parse(pageSource))

// maxViolationsShown bounds each invariant's list on the page; report.json has them all.
const maxViolationsShown = 100

// page is what the template draws: the Report turned into rows and chart geometry.
type page struct {
	R          *Report
	Passed     bool
	Why        string // why the headline says FAILED when the report itself says passed
	Started    string
	Ended      string
	Settled    string
	RunFor     string
	Charts     []chart
	FaultKinds []faultKind
	Faults     []faultRow
	Invariants []invariantRow
	ByCell     bool   // the invariants were checked per cell: the table has a cell column
	CellsText  string // "a (acme), b (globex)"
	Violated   int
	Paths      []pathRow
	Exercised  []Component
	Skipped    []Component
	Totals     []totalRow
}

type faultKind struct {
	Kind, Color, Dash string
	Count             int
}

type faultRow struct {
	N                    int
	T                    float64
	Kind, Target, Detail string
	Color, Dash          string
}

type invariantRow struct {
	Invariant
	Shown []string
	More  int
}

type pathRow struct {
	Name string
	N    int
}

type totalRow struct {
	Name, Value string
	Sub         bool // a line under the one before (faults of one kind)
}

// Draw writes r as a self-contained HTML page: inline CSS and SVG, no script, no external
// reference (its Content-Security-Policy forbids loading anything).
func Draw(w io.Writer, r *Report) error {
	return pageTmpl.Execute(w, newPage(r))
}

// Headline is what the page's headline says: passed only when the run says so, at least one
// invariant was checked, and none is violated.
func Headline(r *Report) bool {
	if !r.Passed || len(r.Invariants) == 0 {
		return false
	}
	for _, inv := range r.Invariants {
		if !inv.OK {
			return false
		}
	}
	return r.Linearizability == nil || r.Linearizability.Result == LinearizableOK
}

// LinearizableOK is Linearizability.Result when every key's history has a linearization.
const LinearizableOK = "ok"

func newPage(r *Report) page {
	p := page{R: r, Started: stamp(r.StartedAt), Ended: stamp(r.EndedAt), Settled: stamp(r.SettledAt)}
	if !r.EndedAt.IsZero() && r.EndedAt.After(r.StartedAt) {
		p.RunFor = formatSeconds(r.EndedAt.Sub(r.StartedAt).Seconds())
	}
	for _, inv := range r.Invariants {
		row := invariantRow{Invariant: inv, Shown: inv.Violations}
		if len(row.Shown) > maxViolationsShown {
			row.Shown, row.More = row.Shown[:maxViolationsShown], len(row.Shown)-maxViolationsShown
		}
		if !inv.OK {
			p.Violated++
		}
		p.ByCell = p.ByCell || inv.Cell != ""
		p.Invariants = append(p.Invariants, row)
	}
	var cells []string
	for _, c := range r.Cells {
		cells = append(cells, c.Name+" ("+strings.Join(c.Tenants, ", ")+")")
	}
	p.CellsText = strings.Join(cells, ", ")
	p.Passed = Headline(r)
	switch {
	case r.Passed && p.Violated > 0:
		p.Why = fmt.Sprintf("The run was marked passed, but %s violated.", count(p.Violated, "invariant"))
	case r.Passed && len(r.Invariants) == 0:
		p.Why = "The run was marked passed, but no invariant was checked."
	case r.Passed && !p.Passed:
		p.Why = "The run was marked passed, but its history is not linearizable."
	}
	for _, name := range slices.Sorted(maps.Keys(r.Paths)) {
		p.Paths = append(p.Paths, pathRow{Name: name, N: r.Paths[name]})
	}

	p.Charts = charts(r)
	styles := faultStyles(r.Faults)
	order := faultOrder(r.Faults)
	// The table numbers faults as the markers do: in time order.
	counts := map[string]int{}
	for i, m := range p.Charts[0].Markers {
		f := r.Faults[order[i]]
		counts[f.Kind]++
		p.Faults = append(p.Faults, faultRow{N: m.N, T: f.T, Kind: f.Kind, Target: f.Target, Detail: f.Detail, Color: m.Color, Dash: m.Dash})
	}
	for k, i := range styles {
		st := palette[i%len(palette)]
		p.FaultKinds = append(p.FaultKinds, faultKind{Kind: k, Color: st.color, Dash: st.dash, Count: counts[k]})
	}
	slices.SortFunc(p.FaultKinds, func(a, b faultKind) int { return styles[a.Kind] - styles[b.Kind] })

	for _, c := range r.Components {
		if c.Exercised {
			p.Exercised = append(p.Exercised, c)
		} else {
			p.Skipped = append(p.Skipped, c)
		}
	}

	t := r.Totals
	pct := ""
	if t.Requests > 0 {
		pct = fmt.Sprintf(" (%.1f%%)", 100*float64(t.Answered2xx)/float64(t.Requests))
	}
	p.Totals = []totalRow{
		{Name: "Requests", Value: fmt.Sprint(t.Requests)},
		{Name: "Answered 2xx", Value: fmt.Sprint(t.Answered2xx) + pct},
		{Name: "Faults injected", Value: fmt.Sprint(sumCounts(t.FaultsByKind))},
	}
	kinds := make([]string, 0, len(t.FaultsByKind))
	for k := range t.FaultsByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		p.Totals = append(p.Totals, totalRow{Name: k, Value: fmt.Sprint(t.FaultsByKind[k]), Sub: true})
	}
	p.Totals = append(p.Totals,
		totalRow{Name: "Worst p99 latency", Value: formatMs(t.WorstP99Ms) + " ms"},
		totalRow{Name: "Longest unavailability (no successful claim)", Value: formatMs(t.LongestUnavailableS) + " s"},
	)
	for _, c := range r.Cells {
		p.Totals = append(p.Totals,
			totalRow{Name: "Cell " + c.Name + " (" + strings.Join(c.Tenants, ", ") + ")", Value: fmt.Sprintf("%d requests, %d 2xx", c.Requests, c.Answered2xx)},
			totalRow{Name: "longest unavailability", Value: formatMs(c.LongestUnavailableS) + " s", Sub: true})
	}
	return p
}

// faultOrder is the faults' indexes in time order (stable: equal times keep the runner's order),
// the order markers numbers them in.
func faultOrder(faults []Fault) []int {
	order := make([]int, len(faults))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(faults[a].T, faults[b].T) })
	return order
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// formatMs writes a total exactly enough: 12.3, 4500, 1.2e+12 for absurd figures.
func formatMs(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case math.Abs(v) >= 1e9:
		return fmt.Sprintf("%.3g", v)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
