package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// synthetic makes a run's report the way the runner would fill it: n one-second samples of
// steady traffic with error spikes and a latency spike after each fault, faults of several
// kinds spread over the run, and one violated invariant naming two key digests. The same seed
// gives the same report.
func synthetic(seed int64, n, faults int) *Report {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	start := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	kinds := []string{"kill-service", "kill-daemon-leader", "kill-pg-primary", "broker-restart", "paysim-error",
		"paysim-drop", "paysim-latency", "callback-dup", "operator-replay", "retention-purge", "reconcile-run"}
	r := &Report{
		Seed: seed, Duration: (time.Duration(n) * time.Second).String(),
		StartedAt: start, EndedAt: start.Add(time.Duration(n) * time.Second),
		SettledAt: start.Add(time.Duration(n+20) * time.Second),
		Components: []Component{
			{Name: "payments-1", Exercised: true}, {Name: "payments-2", Exercised: true},
			{Name: "daemon-1", Exercised: true}, {Name: "daemon-2", Exercised: true},
			{Name: "rabbitmq", Exercised: true}, {Name: "paysim", Exercised: true},
			{Name: "postgres-ha", Exercised: false, Why: "pg_auto_failover is not installed: a single cluster ran instead"},
		},
		Totals: Totals{FaultsByKind: map[string]int{}},
	}
	for i := range faults {
		t := math.Round((float64(i)+0.5)*float64(n)/float64(faults)*10) / 10
		k := kinds[i%len(kinds)]
		r.Faults = append(r.Faults, Fault{T: t, Kind: k, Target: fmt.Sprintf("proc-%d", i%3+1), Detail: "synthetic"})
		r.Totals.FaultsByKind[k]++
	}
	unavailable, longest := 0.0, 0.0
	for s := range n {
		t := float64(s)
		hurt := 0.0 // how recently a fault struck: 1 right after, fading over five seconds
		for _, f := range r.Faults {
			if d := t - f.T; d >= -1 && d < 5 {
				hurt = math.Max(hurt, 1-math.Max(d, 0)/5)
			}
		}
		req := 180 + rng.IntN(40)
		errs := map[string]int{}
		if hurt > 0 {
			errs["5xx"] = int(hurt * 60)
			errs["conn"] = int(hurt * 25)
			if rng.IntN(2) == 0 {
				errs["timeout"] = rng.IntN(10) + 1
			}
		}
		if rng.IntN(10) == 0 {
			errs["409"] = rng.IntN(4) + 1
		}
		bad := 0
		for _, v := range errs {
			bad += v
		}
		ok := max(req-bad, 0)
		if hurt > 0.9 && s%7 == 0 {
			ok, errs["conn"] = 0, req // a stretch with nothing answered
		}
		if len(errs) == 0 {
			errs = nil
		}
		p50 := 4 + rng.Float64()*2 + hurt*40
		p99 := 20 + rng.Float64()*10 + hurt*900
		r.Samples = append(r.Samples, Sample{T: t, Requests: req, ClaimsPerSec: float64(ok), P50Ms: p50, P99Ms: p99, Errors: errs})
		r.Totals.Requests += req
		r.Totals.Answered2xx += ok
		r.Totals.WorstP99Ms = math.Max(r.Totals.WorstP99Ms, p99)
		if ok == 0 {
			unavailable++
			longest = math.Max(longest, unavailable)
		} else {
			unavailable = 0
		}
	}
	r.Totals.LongestUnavailableS = longest
	r.Invariants = []Invariant{
		{Name: "every 2xx key charged exactly once at paysim", OK: true, Checked: r.Totals.Answered2xx},
		{Name: "no charge without a completed key or an open finding", OK: false, Checked: 4210,
			Violations: []string{"key 3f9a1c0e7b2d4a55 charged without a completed key", "key a1b2c3d4e5f60718 charged without a completed key"}},
		{Name: "no completed key lost", OK: true, Checked: 5120},
		{Name: "every consumer effect applied exactly once", OK: true, Checked: 980},
		{Name: "audit chain verifies against its checkpoint", OK: true, Checked: 311},
	}
	r.Passed = false
	return r
}
