// Package benchload drives a benchmark's operations from a number of concurrent clients and
// sums what they took, the same way for every benchmark that compares idemops with a baseline
// (the claim path over SQL, HTTP or gRPC), so the two sides of a ratio are measured alike.
package benchload

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Result accumulates operations, their summed latency and the wall time they took.
type Result struct {
	N       int
	Latency time.Duration
	Wall    time.Duration
}

// Add adds o's operations and times to r (rounds of one side, summed).
func (r *Result) Add(o Result) {
	r.N += o.N
	r.Latency += o.Latency
	r.Wall += o.Wall
}

// Mean is the mean latency of one operation.
func (r Result) Mean() time.Duration { return r.Latency / time.Duration(r.N) }

// PerSec is the throughput over the wall time.
func (r Result) PerSec() float64 { return float64(r.N) / r.Wall.Seconds() }

// Run calls fn(ctx, prefix, i) for i in from..from+n-1 on conc workers; the first error fails
// the benchmark.
func Run(b testing.TB, conc, from, n int, prefix string, fn func(context.Context, string, int) error) Result {
	b.Helper()
	ctx := context.Background()
	var next, sum atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := fn(ctx, prefix, from+i); err != nil {
					failed.Store(err)
					return
				}
				sum.Add(int64(time.Since(t0)))
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return Result{N: n, Latency: time.Duration(sum.Load()), Wall: time.Since(start)}
}

// EnvInt is the positive integer in the environment variable name, else def (benchmark sizes).
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
