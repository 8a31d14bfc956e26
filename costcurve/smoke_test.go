package costcurve

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// benchmarks are the package's cost-curve benchmarks, one per path.
var benchmarks = []string{"BenchmarkSearch", "BenchmarkFindByKey", "BenchmarkDashboard", "BenchmarkAttention",
	"BenchmarkRetentionPreview", "BenchmarkFindingsGroups", "BenchmarkReclaimScan", "BenchmarkPurgeDay", "BenchmarkReconcile"}

// The harness itself, in make test: every benchmark runs once over a world of 10k keys, a few
// samples per case, and each path's own checks hold (a page of 50 keys, the key found, the
// preview answered, no lease taken over, the day purged, every statement line matched). The
// figures mean nothing at this size; `make bench` measures.
func TestCostCurves_EveryBenchmarkRunsOnASmallWorld(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$", "-test.bench", ".", "-test.benchtime", "1x", "-test.timeout", "5m")
	cmd.Env = append(os.Environ(), "IDEMOPS_BENCH_SIZES=10k", "IDEMOPS_BENCH_SAMPLES=3", "IDEMOPS_BENCH_KEEP=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the benchmarks failed: %v\n%s", err, out)
	}
	for _, name := range benchmarks {
		if !strings.Contains(string(out), name+"/keys=10k") {
			t.Errorf("%s did not run at 10k keys:\n%s", name, out)
		}
	}
}
