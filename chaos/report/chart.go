package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A chart's geometry in SVG user units. The page scales the SVG to its width (viewBox), so
// these are proportions more than pixels.
const (
	chartW      = 960
	chartH      = 240
	plotLeft    = 64
	plotRight   = 16
	plotTop     = 44 // room for the fault labels above the plot
	plotBottom  = 32
	plotW       = chartW - plotLeft - plotRight
	plotH       = chartH - plotTop - plotBottom
	labelRows   = 3    // rows of fault labels above the plot
	labelCharPx = 5.6  // about the width of one character of a fault label (10px sans-serif)
	maxDrawn    = 1e15 // values above this are drawn at this height (the tables show them as they are)
	maxErrLines = 8    // error kinds beyond these are drawn as one "other kinds" line
)

// palette is for lines and fault kinds; each entry also has a dash pattern, so no series is told
// apart by colour alone (the legend draws the same dash).
var palette = []struct{ color, dash string }{
	{"#1f77b4", ""}, {"#d62728", "6 3"}, {"#2ca02c", "2 2"}, {"#9467bd", "8 3 2 3"},
	{"#8c564b", "4 4"}, {"#e377c2", "1 3"}, {"#17becf", "10 2"}, {"#7f7f7f", "3 3 1 3"},
	{"#bcbd22", "5 2 1 2"}, {"#ff7f0e", "1 1"}, {"#393b79", "12 4"}, {"#637939", "6 2 2 2 2 2"},
	{"#843c39", "2 5"},
}

// tick is one labelled position on an axis.
type tick struct {
	Pos   float64
	Label string
}

// series is one line of a chart.
type series struct {
	Name   string
	Color  string
	Dash   string
	Points string      // SVG polyline points, empty when there is a single sample (Dot then)
	Dot    *[2]float64 // a lone sample, drawn as a dot so it is visible
}

// marker is one fault on a chart's time axis.
type marker struct {
	N        int // the fault's number in the faults table
	X        float64
	Color    string
	Dash     string
	Kind     string
	LabelX   float64
	LabelY   float64 // 0: no room for the label (the table still lists the fault)
	LabelEnd bool    // the label ends at the marker (near the right edge)
	Title    string  // shown on hover and read by screen readers
}

// outage is a stretch of samples with no successful claim, shaded on the claims chart.
type outage struct {
	X, W  float64
	Title string
}

// chart is one time chart, ready for the template.
type chart struct {
	ID                       string
	Title, Desc, Unit        string
	W, H                     int
	Left, Top, Right, Bottom float64 // the plot area
	TickEnd                  float64 // where the time axis's tick marks end, below the plot
	MidY                     float64 // the plot's vertical middle, where the unit is written
	PlotH                    float64
	XTicks, YTicks           []tick
	Series                   []series
	Markers                  []marker
	Outages                  []outage // stretches with no successful claim (the claims chart only)
	Empty                    bool     // no samples: the chart says so instead of drawing lines
}

// timeAxis maps seconds since the start onto the plot.
type timeAxis struct{ max float64 }

func (a timeAxis) x(t float64) float64 {
	t = math.Max(0, math.Min(t, a.max))
	return round2(plotLeft + t/a.max*plotW)
}

// newTimeAxis spans the run: the asked duration, the samples (smp, in time order) and the
// faults, whichever is longest.
func newTimeAxis(r *Report, smp []Sample) timeAxis {
	m := 0.0
	if d := runSeconds(r); d > 0 {
		m = d
	}
	if n := len(smp); n > 0 {
		m = math.Max(m, smp[n-1].T+bucketSeconds(smp))
	}
	for _, f := range r.Faults {
		m = math.Max(m, f.T)
	}
	if !(m > 0) || math.IsInf(m, 0) {
		m = 1
	}
	return timeAxis{max: math.Min(m, 1e9)}
}

// bucketSeconds is the samples' bucket width (the gap between the last two; one second when
// there is only one sample).
func bucketSeconds(s []Sample) float64 {
	if n := len(s); n >= 2 {
		if d := s[n-1].T - s[n-2].T; d > 0 {
			return d
		}
	}
	return 1
}

// timeTicks picks a round step (1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min, 1 h, …) giving
// at most eight intervals.
func timeTicks(a timeAxis) []tick {
	steps := []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if a.max/s <= 8 {
			step = s
			break
		}
	}
	for i := 0; a.max/step > 8 && i < 64; i++ { // beyond an hour: whole hours, doubling
		step *= 2
	}
	var ts []tick
	for i := 0; i <= 64; i++ {
		t := float64(i) * step
		if t > a.max+1e-9 {
			break
		}
		ts = append(ts, tick{Pos: a.x(t), Label: formatSeconds(t)})
	}
	return ts
}

// formatSeconds writes an axis time: 45s, 2m, 2m30s, 1h5m.
func formatSeconds(t float64) string {
	s := int64(math.Round(t))
	h, m, sec := s/3600, s%3600/60, s%60
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if sec > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%ds", sec)
	}
	return b.String()
}

// valueAxis maps a value onto the plot, 0 at the bottom.
type valueAxis struct{ max float64 }

func (a valueAxis) y(v float64) float64 {
	v = math.Max(0, math.Min(clampValue(v), a.max))
	return round2(plotTop + plotH - v/a.max*plotH)
}

// niceValueAxis rounds the top up to a 1, 2, 2.5 or 5 × 10ⁿ step, about five intervals.
func niceValueAxis(max float64) (valueAxis, []tick) {
	max = clampValue(max)
	if max <= 0 {
		max = 1
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	top := math.Ceil(max/step-1e-9) * step
	a := valueAxis{max: top}
	var ts []tick
	for i := 0; i <= 10; i++ {
		v := float64(i) * step
		if v > top+step/2 {
			break
		}
		ts = append(ts, tick{Pos: a.y(v), Label: formatValue(v)})
	}
	return a, ts
}

// clampValue keeps a value drawable: not negative, not NaN, not beyond maxDrawn.
func clampValue(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return math.Min(v, maxDrawn)
}

// formatValue writes an axis or table figure short: 950, 1.5k, 12M, 3G, 1e+300.
func formatValue(v float64) string {
	abs := math.Abs(v)
	if abs >= 1e16 || math.IsNaN(v) {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if abs >= u.div {
			return trimFloat(v/u.div) + u.suffix
		}
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// line draws one series of per-sample values.
func line(name string, style int, samples []Sample, ta timeAxis, va valueAxis, value func(Sample) float64) series {
	p := palette[style%len(palette)]
	s := series{Name: name, Color: p.color, Dash: p.dash}
	if len(samples) == 1 {
		s.Dot = &[2]float64{ta.x(samples[0].T), va.y(value(samples[0]))}
		return s
	}
	var b strings.Builder
	for i, smp := range samples {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(ta.x(smp.T), 'f', -1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(va.y(value(smp)), 'f', -1, 64))
	}
	s.Points = b.String()
	return s
}

// faultStyles gives each fault kind a palette entry, in the kinds' alphabetical order, so every chart and the legend agree.
func faultStyles(faults []Fault) map[string]int {
	var kinds []string
	for _, f := range faults {
		if !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	slices.Sort(kinds)
	st := make(map[string]int, len(kinds))
	for i, k := range kinds {
		st[k] = i
	}
	return st
}

// markers places every fault on the time axis, labelled with its kind in up to labelRows rows
// above the plot; a label that fits in no row is left out (the marker stays, with its title,
// and the faults table lists it), so a long run's many faults do not pile up into a smear.
func markers(faults []Fault, ta timeAxis, styles map[string]int) []marker {
	rowEnd := make([]float64, labelRows)
	for i := range rowEnd {
		rowEnd[i] = math.Inf(-1)
	}
	ms := make([]marker, 0, len(faults))
	for n, i := range faultOrder(faults) {
		f := faults[i]
		p := palette[styles[f.Kind]%len(palette)]
		m := marker{N: n + 1, X: ta.x(f.T), Color: p.color, Dash: p.dash, Kind: f.Kind,
			Title: fmt.Sprintf("fault %d at %s: %s %s", n+1, formatSeconds(f.T), f.Kind, f.Target)}
		w := float64(utf8.RuneCountInString(f.Kind))*labelCharPx + 4
		from, to := m.X+2, m.X+2+w
		if to > chartW { // too near the right edge: the label ends at the marker instead
			from, to, m.LabelEnd = m.X-2-w, m.X-2, true
		}
		for row := range rowEnd {
			if from >= rowEnd[row] {
				rowEnd[row] = to
				m.LabelY = float64(12 + row*11)
				m.LabelX = m.X + 2
				if m.LabelEnd {
					m.LabelX = m.X - 2
				}
				break
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// newChart lays out an empty chart with its axes and fault markers; the caller adds series.
func newChart(id, title, unit string, r *Report, ta timeAxis, ymax float64, styles map[string]int) (chart, valueAxis) {
	va, yt := niceValueAxis(ymax)
	c := chart{
		ID: id, Title: title, Unit: unit, W: chartW, H: chartH,
		Left: plotLeft, Top: plotTop, Right: plotLeft + plotW, Bottom: plotTop + plotH, TickEnd: plotTop + plotH + 5, MidY: plotTop + plotH/2, PlotH: plotH,
		XTicks: timeTicks(ta), YTicks: yt,
		Markers: markers(r.Faults, ta, styles),
		Empty:   len(r.Samples) == 0,
	}
	return c, va
}

// charts draws the three time charts: claims/s, latency p50/p99, errors by kind.
func charts(r *Report) []chart {
	// In time order, whatever order the runner appended them in: a line must not double back.
	smp := slices.SortedStableFunc(slices.Values(r.Samples), func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
	ta := newTimeAxis(r, smp)
	styles := faultStyles(r.Faults)
	dur := formatSeconds(ta.max)
	nf := len(r.Faults)

	var cmax, cpeak, lmax, p99peak, p99at float64
	for _, s := range smp {
		if s.ClaimsPerSec > cmax {
			cmax, cpeak = s.ClaimsPerSec, s.T
		}
		lmax = math.Max(lmax, math.Max(s.P50Ms, s.P99Ms))
		if s.P99Ms > p99peak {
			p99peak, p99at = s.P99Ms, s.T
		}
	}

	claims, va := newChart("chart-claims", "Claims per second", "claims/s", r, ta, cmax, styles)
	claims.Series = []series{line("claims/s", 0, smp, ta, va, func(s Sample) float64 { return s.ClaimsPerSec })}
	claims.Outages = outages(smp, ta)
	claims.Desc = fmt.Sprintf("Answered claims per second over %s, %s; peak %s/s at %s; %s marked; %s without a successful claim shaded.",
		dur, count(len(smp), "sample"), formatValue(cmax), formatSeconds(cpeak), count(nf, "fault"), count(len(claims.Outages), "stretch"))

	lat, va := newChart("chart-latency", "Claim latency, p50 and p99", "ms", r, ta, lmax, styles)
	lat.Series = []series{
		line("p50", 2, smp, ta, va, func(s Sample) float64 { return s.P50Ms }),
		line("p99", 1, smp, ta, va, func(s Sample) float64 { return s.P99Ms }),
	}
	lat.Desc = fmt.Sprintf("Client-observed latency in milliseconds over %s, p50 and p99 per sample; worst p99 %s ms at %s; %s marked.",
		dur, formatValue(p99peak), formatSeconds(p99at), count(nf, "fault"))

	kinds, other := errorKinds(smp)
	errOf := func(s Sample, kind string) float64 {
		if kind == otherKind {
			n := 0
			for _, k := range other {
				n += s.Errors[k]
			}
			return float64(n)
		}
		return float64(s.Errors[kind])
	}
	var emax float64
	for _, s := range smp {
		for _, k := range kinds {
			emax = math.Max(emax, errOf(s, k))
		}
	}
	errs, va := newChart("chart-errors", "Errors by kind", "errors per sample", r, ta, emax, styles)
	for i, k := range kinds {
		errs.Series = append(errs.Series, line(k, i, smp, ta, va, func(s Sample) float64 { return errOf(s, k) }))
	}
	if len(kinds) == 0 {
		errs.Desc = fmt.Sprintf("No errors in %s over %s; %s marked.", count(len(smp), "sample"), dur, count(nf, "fault"))
	} else {
		errs.Desc = fmt.Sprintf("Errors per sample over %s, one line per kind (%s); highest %s in one sample; %s marked.",
			dur, strings.Join(kinds, ", "), formatValue(emax), count(nf, "fault"))
	}
	return []chart{claims, lat, errs}
}

const otherKind = "other kinds"

// errorKinds lists the error kinds by total, most first; beyond maxErrLines the rest are
// returned as other and drawn as one "other kinds" line.
func errorKinds(smp []Sample) (kinds, other []string) {
	total := map[string]int{}
	for _, s := range smp {
		for k, n := range s.Errors {
			total[k] += n
		}
	}
	for k := range total {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if total[a] != total[b] {
			return total[b] - total[a]
		}
		return strings.Compare(a, b)
	})
	if len(kinds) > maxErrLines {
		other = kinds[maxErrLines-1:]
		kinds = append(kinds[:maxErrLines-1:maxErrLines-1], otherKind)
	}
	return kinds, other
}

// runSeconds is the run's length: the duration asked for, else the time from start to end.
func runSeconds(r *Report) float64 {
	if d, err := time.ParseDuration(r.Duration); err == nil && d > 0 {
		return d.Seconds()
	}
	if !r.StartedAt.IsZero() && r.EndedAt.After(r.StartedAt) {
		return r.EndedAt.Sub(r.StartedAt).Seconds()
	}
	return 0
}

// outages finds the runs of samples (in time order) with no answered claim; each lasts until
// the next sample with one, or one bucket past the last.
func outages(smp []Sample, ta timeAxis) []outage {
	var out []outage
	for i := 0; i < len(smp); {
		if smp[i].ClaimsPerSec > 0 {
			i++
			continue
		}
		j := i
		for j < len(smp) && smp[j].ClaimsPerSec <= 0 {
			j++
		}
		from, to := smp[i].T, smp[j-1].T+bucketSeconds(smp)
		if j < len(smp) {
			to = smp[j].T
		}
		x := ta.x(from)
		out = append(out, outage{X: x, W: math.Max(round2(ta.x(to)-x), 1),
			Title: fmt.Sprintf("no successful claim from %s to %s (%s s)", formatSeconds(from), formatSeconds(to), trimFloat(to-from))})
		i = j
	}
	return out
}

// count writes n and the noun, plural unless n is 1: "1 fault", "24 faults".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") {
		return strconv.Itoa(n) + " " + noun + "es"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
